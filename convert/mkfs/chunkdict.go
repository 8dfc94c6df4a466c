package mkfs

import (
	"fmt"
	"path/filepath"

	"github.com/ocierofs/ocierofs/convert/imagefile"
	"github.com/ocierofs/ocierofs/erofs"
)

// A chunk dictionary (mkfs --blobdev BLOB --chunk-dict LOWER…): the images
// of the layers below, built with blobs, whose chunks a new layer refers
// to instead of storing them again in its own blob. The new image names
// their blobs as its devices 2 … n, after its own; a merged image of the
// layers then holds every chunk once (the nydus idea, on plain EROFS).

// chunkDict is the opened dictionary images and the devices they bring.
type chunkDict struct {
	layers []*imagefile.File
	slots  []erofs.DeviceSlot // devices 2 … n of the new image
	num    map[string]uint16  // blob file → device number
}

// openChunkDicts opens the dictionary images and numbers their blobs.
func openChunkDicts(paths []string) (*chunkDict, error) {
	d := &chunkDict{num: map[string]uint16{}}
	for _, p := range paths {
		l, err := imagefile.Open(p)
		if err != nil {
			d.close()
			return nil, fmt.Errorf("chunk dictionary: %w", err)
		}
		d.layers = append(d.layers, l)
		slots := l.Image.Devices()
		if len(slots) == 0 || l.DeviceFiles == nil {
			d.close()
			return nil, fmt.Errorf("chunk dictionary %s: not an image whose data is in blobs beside it (build it with --blobdev)", p)
		}
		for i, f := range l.DeviceFiles {
			abs, err := filepath.Abs(f)
			if err != nil {
				d.close()
				return nil, err
			}
			if _, ok := d.num[abs]; !ok {
				d.slots = append(d.slots, erofs.DeviceSlot{Tag: slots[i].Tag, Blocks: slots[i].Blocks})
				d.num[abs] = uint16(1 + len(d.slots))
			}
		}
	}
	return d, nil
}

func (d *chunkDict) close() {
	for _, l := range d.layers {
		l.Close()
	}
}

// preload gives the Builder every chunk of the dictionary's files that a
// file of the new image could hold: each piece of chunkSize bytes at a
// chunk boundary of its file, within one stored run.
func (d *chunkDict) preload(b *erofs.Builder, chunkSize int) error {
	bs := int64(b.BlockSize())
	cs := int64(chunkSize)
	if cs == 0 {
		cs = bs
	}
	buf := make([]byte, cs)
	for _, l := range d.layers {
		seen := map[uint64]bool{}
		err := l.Image.Walk(".", func(p string, ino *erofs.Inode) error {
			if !ino.IsRegular() || seen[ino.Nid] {
				return nil
			}
			seen[ino.Nid] = true
			bits, refs, ok, err := l.Image.ChunkRefs(ino)
			if err != nil || !ok {
				return err
			}
			span := bs << bits // bytes of one ref
			if span < cs {
				return nil // its pieces are not contiguous at our chunk size
			}
			for i, r := range refs {
				if r.Hole || r.Device == 0 || int(r.Device) > len(l.DeviceFiles) {
					continue
				}
				abs, err := filepath.Abs(l.DeviceFiles[r.Device-1])
				if err != nil {
					return err
				}
				dev, f := d.num[abs], l.Files[r.Device] // files[0] is the image
				start := int64(i) * span
				for off := int64(0); off < span && start+off < ino.Size; off += cs {
					n := min(cs, ino.Size-start-off)
					pos := int64(r.Block)*bs + off
					if _, err := f.ReadAt(buf[:n], pos); err != nil {
						return fmt.Errorf("%s: %s: chunk at %d of %s: %w", l.Path, p, pos, abs, err)
					}
					if err := b.KnownChunk(buf[:n], dev, r.Block+uint32(off/bs)); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("chunk dictionary %s: %w", l.Path, err)
		}
	}
	return nil
}

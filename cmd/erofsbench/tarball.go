package main

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

func timeFixed() time.Time { return time.Unix(fixedMtime, 0) }

// datasetInfo describes one generated dataset; it is kept in
// root/.stamp/NAME.json and copied into the JSON results.
type datasetInfo struct {
	Name      string `json:"name"`
	Files     int    `json:"files"`
	Dirs      int    `json:"dirs"`
	Symlinks  int    `json:"symlinks"`
	Hardlinks int    `json:"hardlinks"`
	Bytes     int64  `json:"bytes"`
	TarBytes  int64  `json:"tar_bytes"`
	TarSHA256 string `json:"tar_sha256"`
	Source    string `json:"source,omitempty"` // linux-source tarball or seed
}

// manifest collects the datasetInfo of every dataset in use.
type manifest struct {
	Seed     uint64                  `json:"seed"`
	Datasets map[string]*datasetInfo `json:"datasets"`
}

func (m *manifest) store(root string, st *datasetInfo) error {
	if b, err := os.ReadFile(filepath.Join(root, ".stamp", st.Name+".source")); err == nil {
		st.Source = strings.TrimSpace(string(b))
	} else if st.Name == "linux" || st.Name == "src256" {
		if b, err := os.ReadFile(filepath.Join(root, ".stamp", "linux.source")); err == nil {
			st.Source = strings.TrimSpace(string(b))
		}
	}
	if st.Source == "" {
		st.Source = fmt.Sprintf("seed %d", m.Seed)
	}
	m.Datasets[st.Name] = st
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, ".stamp", st.Name+".json"), b, 0o644)
}

func (m *manifest) load(root, name string) error {
	b, err := os.ReadFile(filepath.Join(root, ".stamp", name+".json"))
	if err != nil {
		return fmt.Errorf("dataset %s: %w (rerun with -force)", name, err)
	}
	st := new(datasetInfo)
	if err := json.Unmarshal(b, st); err != nil {
		return fmt.Errorf("dataset %s: %w", name, err)
	}
	m.Datasets[name] = st
	return nil
}

// writeTar writes the tree under dir to out as an OCI layer would hold it:
// PAX format, entries relative to dir (no "./" and no entry for dir itself),
// names sorted bytewise within each directory, owner 0:0 without names,
// mtimes in whole seconds, no atime/ctime. Hard links become link entries
// to the first path of the inode; device nodes and FIFOs are kept.
func writeTar(dir, out string) (*datasetInfo, error) {
	return writeTarMtime(dir, out, nil)
}

// writeTarMtime is writeTar with every entry's mtime set to *mtime when
// mtime is not nil: for trees whose times cannot be pinned on disk (a
// rootfs full of absolute symlinks, which os.Chtimes would follow out of
// the tree).
func writeTarMtime(dir, out string, mtime *time.Time) (*datasetInfo, error) {
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	t := &tarTree{dir: dir, mtime: mtime, tw: tar.NewWriter(bw), st: &datasetInfo{}, seen: map[devIno]string{}}
	err = filepath.WalkDir(dir, t.add)
	if err == nil {
		err = t.tw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		os.Remove(out + ".tmp")
		return nil, err
	}
	t.st.TarBytes = cw.n
	t.st.TarSHA256 = hex.EncodeToString(h.Sum(nil))
	return t.st, os.Rename(out+".tmp", out)
}

// devIno names an inode.
type devIno struct{ dev, ino uint64 }

// tarTree is writeTarMtime's walk: the tar being written, the counts of
// what is in it, and the first path of every inode with hard links.
type tarTree struct {
	dir   string
	mtime *time.Time
	tw    *tar.Writer
	st    *datasetInfo
	seen  map[devIno]string
}

// add writes the entry of the path p of the walk (all but dir itself).
func (t *tarTree) add(p string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if p == t.dir {
		return nil
	}
	rel, _ := filepath.Rel(t.dir, p)
	rel = filepath.ToSlash(rel)
	fi, err := d.Info()
	if err != nil {
		return err
	}
	hdr, rdev, link := t.header(rel, fi)
	if link {
		t.st.Hardlinks++
		return t.tw.WriteHeader(hdr)
	}
	return t.write(hdr, p, fi, rdev)
}

// header is the tar header of fi at rel, with its set-ID and sticky bits,
// and its device number. For a path of an inode met before (not a
// directory) it is a link entry to the inode's first path, and link is
// true.
func (t *tarTree) header(rel string, fi fs.FileInfo) (hdr *tar.Header, rdev uint64, link bool) {
	hdr = &tar.Header{
		Name:    rel,
		Mode:    int64(fi.Mode().Perm()),
		ModTime: fi.ModTime().Truncate(time.Second),
		Format:  tar.FormatPAX,
	}
	if t.mtime != nil {
		hdr.ModTime = *t.mtime
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return hdr, 0, false
	}
	hdr.Mode |= int64(sys.Mode & (syscall.S_ISUID | syscall.S_ISGID | syscall.S_ISVTX))
	rdev = uint64(sys.Rdev)
	if !fi.IsDir() && sys.Nlink > 1 {
		key := devIno{uint64(sys.Dev), sys.Ino}
		if first, ok := t.seen[key]; ok {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return hdr, rdev, true
		}
		t.seen[key] = rel
	}
	return hdr, rdev, false
}

// write writes the entry of fi (at path p) by its type, with a regular
// file's data, and counts it.
func (t *tarTree) write(hdr *tar.Header, p string, fi fs.FileInfo, rdev uint64) error {
	switch {
	case fi.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		t.st.Dirs++
		return t.tw.WriteHeader(hdr)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		t.st.Symlinks++
		return t.tw.WriteHeader(hdr)
	case fi.Mode().IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		t.st.Files++
		t.st.Bytes += fi.Size()
		return t.writeFile(hdr, p)
	case fi.Mode()&fs.ModeNamedPipe != 0:
		hdr.Typeflag = tar.TypeFifo
		return t.tw.WriteHeader(hdr)
	case fi.Mode()&fs.ModeDevice != 0:
		hdr.Typeflag = tar.TypeBlock
		if fi.Mode()&fs.ModeCharDevice != 0 {
			hdr.Typeflag = tar.TypeChar
		}
		hdr.Devmajor, hdr.Devminor = devMajor(rdev), devMinor(rdev)
		return t.tw.WriteHeader(hdr)
	default:
		return fmt.Errorf("%s: unsupported file type %v", p, fi.Mode().Type())
	}
}

// writeFile writes the header of the regular file p and its data, which
// must be hdr.Size bytes.
func (t *tarTree) writeFile(hdr *tar.Header, p string) error {
	if err := t.tw.WriteHeader(hdr); err != nil {
		return err
	}
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	n, err := io.Copy(t.tw, src)
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%s changed size while being read", p)
	}
	return err
}

// devMajor and devMinor split a Linux dev_t (glibc's encoding: 12-bit
// major and 20-bit minor, spread over the 64 bits).
func devMajor(d uint64) int64 { return int64((d>>8)&0xfff | (d>>32)&0xfffff000) }
func devMinor(d uint64) int64 { return int64(d&0xff | (d>>12)&0xffffff00) }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeManifest writes root/MANIFEST.txt: one line per dataset with its
// counts and the sha256 of its tar, so that two machines can check that
// they measured the same bytes.
func writeManifest(root string, m *manifest) error {
	var names []string
	for n := range m.Datasets {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "# erofsbench datasets, seed %d, mtime %d\n", m.Seed, fixedMtime)
	for _, n := range names {
		d := m.Datasets[n]
		fmt.Fprintf(&b, "%s: files=%d dirs=%d symlinks=%d hardlinks=%d bytes=%d (%.1f MiB) tar=%d sha256=%s source=%s\n",
			n, d.Files, d.Dirs, d.Symlinks, d.Hardlinks, d.Bytes, float64(d.Bytes)/(1<<20), d.TarBytes, d.TarSHA256, d.Source)
	}
	return os.WriteFile(filepath.Join(root, "MANIFEST.txt"), []byte(b.String()), 0o644)
}

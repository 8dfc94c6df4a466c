package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/lazy"
	"github.com/ocierofs/ocierofs/oci/chunkindex"
)

// hasChunkIndex reports whether layer i of a manifest has a chunk index
// of the EROFS image spec: embedded (its range annotated) or a
// standalone chunk-index layer after it.
func hasChunkIndex(layers []v1.Descriptor, i int) bool {
	if _, ok := layers[i].Annotations[chunkindex.AnnotationRange]; ok {
		return true
	}
	return i+1 < len(layers) && layers[i+1].MediaType == convert.MediaTypeChunkIndex
}

// openChunkIndex reads layer i's chunk index, from b (the layer's blob)
// or from the standalone layer after it, fetched through cache and
// checked against its digest. An index this program cannot read is no
// index (nil, nil: the layer is read as it would be without one, §2.2);
// a corrupt one is an error.
func openChunkIndex(cache *lazy.Cache, src lazy.Source, b *lazy.Blob, layers []v1.Descriptor, i int, lopt lazy.Options, logf func(string)) (*chunkindex.Index, error) {
	d := layers[i]
	zstdLayer := strings.HasSuffix(string(d.MediaType), "+zstd")
	var x *chunkindex.Index
	var err error
	if _, ok := d.Annotations[chunkindex.AnnotationRange]; ok {
		x, err = chunkindex.Embedded(b, b.Size(), zstdLayer, d.Annotations)
	} else {
		ci := layers[i+1]
		var payload []byte
		if payload, err = fetchSmallBlob(cache, src, ci, lopt); err == nil {
			x, err = chunkindex.Standalone(payload, ci.Annotations, d.Digest.String(), d.Size, zstdLayer)
		}
	}
	if errors.Is(err, chunkindex.ErrUnreadable) {
		logf(fmt.Sprintf("layer %d (%s): its chunk index is not one this program reads (%v): read without it", i, d.Digest, err))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("layer %d (%s): %w", i, d.Digest, err)
	}
	return x, nil
}

// fetchSmallBlob fetches a standalone chunk-index layer whole and checks
// its digest.
func fetchSmallBlob(cache *lazy.Cache, src lazy.Source, d v1.Descriptor, lopt lazy.Options) ([]byte, error) {
	if d.Size <= 0 || d.Size > chunkindex.MaxPayload {
		return nil, fmt.Errorf("chunk-index layer %s: %d bytes", d.Digest, d.Size)
	}
	b, err := cache.Ranged(src, d.Digest, d.Size, lopt)
	if err != nil {
		return nil, err
	}
	p := make([]byte, d.Size)
	if _, err := b.ReadAt(p, 0); err != nil {
		return nil, fmt.Errorf("chunk-index layer %s: %w", d.Digest, err)
	}
	if s := sha256.Sum256(p); d.Digest.Algorithm != "sha256" || hex.EncodeToString(s[:]) != d.Digest.Hex {
		return nil, fmt.Errorf("chunk-index layer %s: its bytes are sha256:%x", d.Digest, s)
	}
	return p, nil
}

package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
)

// optionsKey names the conversion options in cache keys: two workers
// with different options never share layers. It is written from the
// options' values (pointers followed, functions left out), so an option
// added to erofs.Options later is part of it without anyone remembering.
func optionsKey(o convert.ImageOptions) string {
	l := o.Layer
	// Nothing the bytes do not depend on: temp dir, goroutines.
	l.Erofs.TempDir, l.Erofs.Workers = "", 0
	var b strings.Builder
	b.WriteString("v1|")
	canon(&b, reflect.ValueOf(l))
	fmt.Fprintf(&b, "|z%t|s%t", o.LayerZstd, o.SpecMediaTypes)
	if o.SpecMediaTypes && (o.Spec.ChunkIndex != convert.ChunkIndexNone || o.Spec.DMVerity) {
		// Only then: the keys of every other conversion stay as they were.
		fmt.Fprintf(&b, "|ci%s:%d|v%t", o.Spec.ChunkIndex, o.Spec.ChunkSize, o.Spec.DMVerity)
	}
	h := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(h[:8])
}

// canon writes a value's contents, the same in every process.
func canon(b *strings.Builder, v reflect.Value) {
	if v.Type() == reflect.TypeOf(time.Time{}) && v.CanInterface() {
		t := v.Interface().(time.Time)
		if t.IsZero() {
			b.WriteString("0")
		} else {
			fmt.Fprint(b, t.UnixNano())
		}
		return
	}
	switch v.Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer, reflect.Interface:
		b.WriteString("-") // hooks: not part of the result's identity
	case reflect.Pointer:
		if v.IsNil() {
			b.WriteString("nil")
		} else {
			canon(b, v.Elem())
		}
	case reflect.Struct:
		b.WriteByte('{')
		for i := 0; i < v.NumField(); i++ {
			b.WriteString(v.Type().Field(i).Name)
			b.WriteByte(':')
			canon(b, v.Field(i))
			b.WriteByte(',')
		}
		b.WriteByte('}')
	case reflect.Slice, reflect.Array:
		b.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			canon(b, v.Index(i))
			b.WriteByte(',')
		}
		b.WriteByte(']')
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		b.WriteByte('{')
		for _, k := range keys {
			canon(b, k)
			b.WriteByte(':')
			canon(b, v.MapIndex(k))
			b.WriteByte(',')
		}
		b.WriteByte('}')
	default:
		fmt.Fprintf(b, "%v", v)
	}
}

// chainKeys are the cache keys of an image's layers: the options and the
// layer's OCI ChainID (its diffID on those of the layers below), since a
// layer's EROFS image depends on the directories below it.
func chainKeys(opts string, diffIDs []v1.Hash) []string {
	keys := make([]string, len(diffIDs))
	var chain string
	for i, d := range diffIDs {
		if i == 0 {
			chain = d.String()
		} else {
			h := sha256.Sum256([]byte(chain + " " + d.String()))
			chain = "sha256:" + hex.EncodeToString(h[:])
		}
		keys[i] = "l." + opts + "." + strings.TrimPrefix(chain, "sha256:")
	}
	return keys
}

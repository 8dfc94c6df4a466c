package convert

import (
	"encoding/json"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/oci"
)

// Converted says why a is a converted image already ("" if it is not): its
// manifest (or index) names the source it was converted from, or its
// layers are EROFS. Converting it again would only rename its source.
func Converted(a *oci.Artifact) string {
	var raw []byte
	var err error
	if a.Index != nil {
		raw, err = a.Index.RawManifest()
	} else {
		raw, err = a.Image.RawManifest()
	}
	if err != nil {
		return ""
	}
	return ConvertedManifest(raw)
}

// ConvertedManifest is Converted of a raw manifest or index.
func ConvertedManifest(raw []byte) string {
	var m struct {
		Annotations map[string]string `json:"annotations"`
		Layers      []struct {
			MediaType types.MediaType `json:"mediaType"`
		} `json:"layers"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	if s := m.Annotations[AnnotationSourceManifest]; s != "" {
		return "a converted image, its " + AnnotationSourceManifest + " being " + s
	}
	for _, l := range m.Layers {
		if IsEROFS(l.MediaType) {
			return "an image with EROFS layers already"
		}
	}
	return ""
}

// SourceAnnotation is the source manifest digest a converted manifest or
// index records (AnnotationSourceManifest); "" if there is none.
func SourceAnnotation(rawManifest []byte) string {
	var m struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(rawManifest, &m) != nil {
		return ""
	}
	return m.Annotations[AnnotationSourceManifest]
}

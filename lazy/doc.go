// Package lazy reads the blobs of an image on demand: byte ranges fetched
// from a registry (HTTP Range requests on its blob endpoint) or read from an
// OCI layout, kept in a chunk cache on disk that every process using the
// same directory shares.
//
//	client, _ := remote.BlobClient(ctx, repo)      // oci.Remote
//	cache, _ := lazy.OpenCache("/var/cache/ocierofs/chunks", 10<<30)
//	blob, _ := cache.Ranged(lazy.Registry(client, repo), desc.Digest, desc.Size, lazy.Options{})
//	img, _ := erofs.Open(blob, blob.Size())        // reads fetch what they touch
//
// A blob is cut into chunks of ChunkSize bytes; each is fetched once, by one
// goroutine of one process at a time (an OFD lock per chunk orders the
// processes), and written to the cache before it is read. A read that the
// registry cannot serve within Options.Timeout fails after retries with
// backoff, so that a file system over a Blob returns EIO instead of hanging.
//
// Verification: a chunk is checked against a SHA-256 digest per chunk
// before use whenever the cache holds those digests, and a mismatch is an
// error for that read, never wrong bytes. The digests come from a whole
// pass over the blob whose digest matched its descriptor (Blob.Prefetch,
// and every blob that has to be fetched whole). A layer that has the EROFS
// image spec's chunk index is read through it (Indexed): each of its
// chunks is checked against the index's checksum before use, the first
// read too, and a +zstd layer is read by ranges, one zstd frame a chunk,
// instead of whole. A layer with the spec's dm-verity tree is read
// through Verity, which checks every data block against the tree, whose
// blocks it fetches on demand. A registry layer with neither, read by
// ranges before a whole pass, is not checked.
//
// Blob.FetchRange and PrefetchRange fetch a region (the files a prefetch
// list laid out together) with one range request per run of missing
// chunks.
package lazy

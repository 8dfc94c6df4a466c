// Package outfile writes the output files of a build (an image, its blob)
// so that they appear under their names only once all are complete: each
// is built in a temporary file beside its name, unnamed where Linux has
// O_TMPFILE (a killed run leaves nothing behind), then given its name,
// keeping what an existing file's permissions and owner were.
package outfile

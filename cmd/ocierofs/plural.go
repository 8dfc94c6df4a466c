package main

import "fmt"

// count says n of noun, in the plural where n is not 1: "1 image",
// "2 images", "0 arguments".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

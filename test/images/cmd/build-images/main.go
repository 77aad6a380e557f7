// Command build-images builds hostlet's e2e test images as OCI layout
// archives and prints one line per image: REF ARCHIVE.
//
//	build-images -out DIR
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hostlet/hostlet/test/images"
)

func main() {
	out := flag.String("out", "", "directory for the image archives (required)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	imgs, err := images.BuildAll(ctx, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "build-images:", err)
		os.Exit(1)
	}
	for _, img := range imgs {
		fmt.Println(img.Ref, img.Archive)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert/mirror"
)

var syncCommand = &cli.Command{
	Name:  "sync",
	Usage: "convert the images of a registry that have no up-to-date EROFS twin yet",
	Description: "Lists the registry's repositories and tags (or reads --list-file: REPO:TAG lines),\n" +
		"keeps those --include/--exclude select, and converts each image whose twin (tag\n" +
		"plus --suffix) is missing or was made from another digest. Running it again\n" +
		"converts nothing new. --dry-run only prints the plan. With --nats the tasks go\n" +
		"to the queue of a serve cluster instead. --prune also deletes the twins whose\n" +
		"source image (or tag) was deleted, so that what was taken down is not pulled\n" +
		"as its twin.",
	Flags: slices.Concat(mirrorFlags(), options.InCategory("Mirror",
		&cli.StringFlag{Name: "list-file", Usage: "REPO:TAG lines to consider instead of the registry's catalog"},
		&cli.BoolFlag{Name: "dry-run", Usage: "print what would be converted (and pruned) and change nothing"},
		&cli.BoolFlag{Name: "prune", Usage: "delete the twins whose source image or tag is gone from the registry"},
		&cli.IntFlag{Name: "images", Value: 1, Usage: "images converted at once"},
	), options.ErofsFlags(), mirrorSourceFlags(), options.ConvertFlags()),
	Action: func(c *cli.Context) error {
		if c.NArg() != 0 {
			return fmt.Errorf("sync: no arguments expected (got %q)", c.Args().Slice())
		}
		ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runSync(ctx, c)
	},
}

type syncReport struct {
	Registry string            `json:"registry"`
	DryRun   bool              `json:"dryRun,omitempty"`
	Items    []mirror.SyncItem `json:"items"`
}

func runSync(ctx context.Context, c *cli.Context) error {
	cfg, err := mirrorConfig(c)
	if err != nil {
		return err
	}
	if c.Bool("prune") && cfg.ListFile != "" {
		return fmt.Errorf("sync: --prune walks the registry's catalog; it does not go with --list-file")
	}
	logger := log.New(os.Stderr, "", log.LstdFlags)
	s := &mirror.Syncer{Config: cfg, Jobs: c.Int("images")}
	if !c.Bool("quiet") {
		s.Logf = logger.Printf
	}
	if cfg.NATS.URL != "" && !c.Bool("dry-run") {
		q, err := mirror.OpenQueue(ctx, cfg, nil)
		if err != nil {
			return err
		}
		defer q.Close()
		s.Queue = q
	} else if s.Twins, err = mirrorTwins(c, cfg, mirror.MemoryCache(), logger); err != nil {
		return err
	}
	items, err := s.Sources(ctx)
	if err != nil {
		return err
	}
	items = s.Plan(ctx, items)
	if !c.Bool("dry-run") {
		items = s.Run(ctx, items)
	}
	if c.Bool("prune") {
		orphans, err := s.Orphans(ctx)
		if err != nil {
			return err
		}
		if !c.Bool("dry-run") {
			orphans = s.Prune(ctx, orphans)
		}
		items = append(items, orphans...)
	}
	rep := syncReport{Registry: cfg.Registry, DryRun: c.Bool("dry-run"), Items: items}
	failed := 0
	for _, it := range items {
		if it.Action == "error" || it.Result == "failed" {
			failed++
		}
	}
	if c.String("output") == "json" {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		for _, it := range items {
			line := fmt.Sprintf("%-11s %s:%s", it.Action, it.Repository, it.Tag)
			if it.Result != "" {
				line += " → " + it.Result
			}
			if it.Detail != "" {
				line += ": " + it.Detail
			}
			fmt.Fprintln(c.App.Writer, line)
		}
	}
	if failed > 0 {
		return cli.Exit(fmt.Sprintf("sync: %d of %d images failed", failed, len(items)), 1)
	}
	return nil
}

// Package mirror converts the images of a registry as they arrive: it reads
// the registry's push notifications (CNCF distribution's or Harbor's),
// queues one task per pushed image on a NATS JetStream work-queue stream,
// and has workers, on one machine or many, push each image's EROFS twin
// (the same repository, the tag plus a suffix). Layers converted once are
// reused by every later image through a cache in a JetStream key-value
// bucket. Sync does the same for what a registry already holds.
//
//	cfg, _ := mirror.LoadConfig("mirror.conf")          // or build a Config
//	q, stop, _ := mirror.OpenQueue(ctx, cfg, nil)        // embedded NATS unless cfg.NATS.URL
//	defer stop()
//	w := mirror.NewWorker(cfg, q, imageOptions, reg)     // converts queued tasks
//	go w.Run(ctx)
//	http.ListenAndServe(cfg.Listen, mirror.NewServer(cfg, q, reg).Handler())
package mirror

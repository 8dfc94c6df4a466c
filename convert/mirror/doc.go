// Package mirror converts the images of a registry as they arrive: it reads
// the registry's push notifications (CNCF distribution's or Harbor's),
// queues one task per pushed image on a NATS JetStream work-queue stream,
// and has workers, on one machine or many, push each image's EROFS twin
// (the same repository, the tag plus a suffix). Layers converted once are
// reused by every later image through a cache in a JetStream key-value
// bucket. A delete notification prunes its repository's twins whose source
// is gone. A Syncer does the same for what a registry holds already, and
// prunes the whole registry.
//
//	cfg, _ := mirror.LoadConfig("mirror.conf") // registry, rules, nats, queue
//	cfg.SetDefaults()
//	q, _ := mirror.OpenQueue(ctx, cfg, log.Printf) // embedded NATS unless cfg.NATS.URL
//	twins := &mirror.Twins{Registry: cfg.Registry, PlainHTTP: cfg.PlainHTTP, Suffix: cfg.Suffix,
//		Remote: cfg.Remote(), Options: opt /* convert.ImageOptions */, Cache: q.LayerCache()}
//	go (&mirror.Worker{Queue: q, Twins: twins}).Run(ctx)
//	http.ListenAndServe(cfg.Listen, mirror.NewServer(cfg, q, mirror.NewMetrics(q.Depth), log.Printf).Handler())
package mirror

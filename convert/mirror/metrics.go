package mirror

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the mirror's Prometheus series (all prefixed ocierofs_mirror_).
type Metrics struct {
	Registry    *prometheus.Registry
	Events      *prometheus.CounterVec   // notifications' pushes and deletes by result
	Pruned      *prometheus.CounterVec   // twins pruned after deletes, by result
	Conversions *prometheus.CounterVec   // task attempts by result
	Duration    *prometheus.HistogramVec // seconds per attempt, by result
	Layers      *prometheus.CounterVec   // layers converted here / reused from the cache
	LowerReads  *prometheus.CounterVec   // cached layers read for their directories
	BytesIn     prometheus.Counter
	BytesOut    prometheus.Counter
}

// NewMetrics registers the series; depth, if set, is read at each scrape
// for the queue gauges.
func NewMetrics(depth func(context.Context) (waiting, inProgress int, err error)) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ocierofs_mirror_events_total",
			Help: "Pushed and deleted manifests reported by notifications, by what became of them (queued, duplicate, filtered, loop, untagged, invalid, unauthorized, oversized: a body over 4 MiB; prune or unpruned for a delete).",
		}, []string{"result"}),
		Pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ocierofs_mirror_pruned_total",
			Help: "Twins whose source was deleted, after the delete's notification: deleted, kept (judged again just before: no orphan any more) or failed; unlisted counts repositories whose twins could not be listed.",
		}, []string{"result"}),
		Conversions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ocierofs_mirror_conversions_total",
			Help: "Task attempts by result: done, skipped, retry, failed.",
		}, []string{"result"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ocierofs_mirror_conversion_duration_seconds",
			Help:    "Seconds per task attempt, by result.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2.5, 12),
		}, []string{"result"}),
		Layers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ocierofs_mirror_layers_total",
			Help: "Source layers converted here (converted) or taken from the shared layer cache (reused).",
		}, []string{"result"}),
		LowerReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ocierofs_mirror_lower_reads_total",
			Help: "Cached layers read for their directories under a converted one: via their skeleton, or the layer itself.",
		}, []string{"via"}),
		BytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ocierofs_mirror_bytes_in_total",
			Help: "Bytes of source layers converted (compressed, as stored in the registry).",
		}),
		BytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ocierofs_mirror_bytes_out_total",
			Help: "Bytes of converted layers pushed.",
		}),
	}
	m.Registry.MustRegister(m.Events, m.Pruned, m.Conversions, m.Duration, m.Layers, m.LowerReads, m.BytesIn, m.BytesOut)
	if depth != nil {
		gauge := func(name, help string, pick func(w, p int) int) prometheus.GaugeFunc {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				w, p, err := depth(ctx)
				if err != nil {
					return -1
				}
				return float64(pick(w, p))
			})
		}
		m.Registry.MustRegister(
			gauge("ocierofs_mirror_queue_depth", "Tasks waiting for a worker (-1: the queue cannot be reached).", func(w, _ int) int { return w }),
			gauge("ocierofs_mirror_queue_in_progress", "Tasks delivered to a worker and not yet acknowledged.", func(_, p int) int { return p }),
		)
	}
	return m
}

// observe records one task attempt.
func (m *Metrics) observe(result string, seconds float64, out *Outcome) {
	if m == nil {
		return
	}
	m.Conversions.WithLabelValues(result).Inc()
	m.Duration.WithLabelValues(result).Observe(seconds)
	if out != nil {
		m.Layers.WithLabelValues("converted").Add(float64(out.LayersConverted))
		m.Layers.WithLabelValues("reused").Add(float64(out.LayersReused))
		m.LowerReads.WithLabelValues("skeleton").Add(float64(out.SkeletonReads))
		m.LowerReads.WithLabelValues("layer").Add(float64(out.LayerReads))
		m.BytesIn.Add(float64(out.BytesIn))
		m.BytesOut.Add(float64(out.BytesOut))
	}
}

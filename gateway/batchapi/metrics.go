package batchapi

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descBacklog = prometheus.NewDesc("sluice_batch_backlog_items", "Batch items not yet run (queued or running), all batches.", nil, nil)
	descBytes   = prometheus.NewDesc("sluice_batch_backlog_bytes", "Bytes of the batch items not yet run.", nil, nil)
	descDrain   = prometheus.NewDesc("sluice_batch_estimated_drain_seconds",
		"How long the backlog would take to run at the rate items have been ending (the slots' rate without one): when the newest batch would end.", nil, nil)
	descItems = prometheus.NewDesc("sluice_batch_items_total",
		"Batch items by outcome: completed, failed, expired; deferred counts the runs sluice refused and put back (overload, spend ceiling), retried those the provider failed.", []string{"outcome"}, nil)
)

// Collector returns the API's metrics (sluice_batch_…), for the caller to
// register: the backlog, read from the store at each scrape, its
// estimated drain, and the executor's counters.
func (a *API) Collector() prometheus.Collector { return collector{a} }

type collector struct{ a *API }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBacklog
	ch <- descBytes
	ch <- descDrain
	ch <- descItems
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	if n, size, err := c.a.store.Backlog(context.Background(), ""); err == nil {
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(n))
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(size))
		if est, _, ok := c.a.estimate(n, 0); ok {
			ch <- prometheus.MustNewConstMetric(descDrain, prometheus.GaugeValue, est.Seconds())
		}
	}
	st := c.a.exec.Stats()
	for _, o := range []struct {
		name string
		v    uint64
	}{{"completed", st.Completed}, {"failed", st.Failed}, {"expired", st.Expired}, {"deferred", st.Deferred}, {"retried", st.Retried}} {
		ch <- prometheus.MustNewConstMetric(descItems, prometheus.CounterValue, float64(o.v), o.name)
	}
}

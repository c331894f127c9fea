package store

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// newSentinelClient is a client of the primary the Sentinels name: a plain
// go-redis client whose every new connection goes to the primary named by
// the Sentinel with the highest configuration epoch, asked all at once.
//
// go-redis's FailoverClient asks one Sentinel, the first that answered,
// and keeps asking it. After a failover only the Sentinel that led it
// knows at once; the others learn it from its hello messages, every two
// seconds — so a client whose Sentinel was not the leader dials the dead
// primary for up to two seconds more, each failed probe of the breaker
// putting the next off by its backoff (measured here: back 2.2s after the
// promotion, where asking them all is back within the next probe). The
// epoch is the Sentinels' own order of their configurations: the highest
// is the newest, whichever Sentinel holds it.
//
// Connections are dialed again when they break (a killed primary) and
// when the node answers READONLY (a primary demoted to a replica: go-redis
// closes such a connection), so each failover is followed at the next
// dial.
func newSentinelClient(o ClientOptions, u *redis.UniversalOptions) *redis.Client {
	s := &sentinels{master: o.SentinelMaster, addrs: o.SentinelAddrs, tls: u.TLSConfig, timeout: u.DialTimeout}
	return redis.NewClient(&redis.Options{
		Addr:                  "sentinel/" + o.SentinelMaster, // a label: Dialer chooses the address
		Dialer:                s.dial,
		Password:              u.Password,
		MaxRetries:            u.MaxRetries,
		DialerRetries:         u.DialerRetries,
		DialTimeout:           u.DialTimeout,
		ReadTimeout:           u.ReadTimeout,
		WriteTimeout:          u.WriteTimeout,
		ContextTimeoutEnabled: u.ContextTimeoutEnabled,
		PoolSize:              u.PoolSize,
	})
}

type sentinels struct {
	master  string
	addrs   []string
	tls     *tls.Config
	timeout time.Duration
}

func (s *sentinels) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	addr, err := s.primary(ctx)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: s.timeout}
	if s.tls != nil {
		return (&tls.Dialer{NetDialer: d, Config: s.tls}).DialContext(ctx, network, addr)
	}
	return d.DialContext(ctx, network, addr)
}

// primary asks every Sentinel for the master's address and epoch and
// returns the address of the answer with the highest config-epoch.
func (s *sentinels) primary(ctx context.Context) (string, error) {
	type answer struct {
		addr  string
		epoch int64
		err   error
	}
	answers := make([]answer, len(s.addrs))
	var wg sync.WaitGroup
	for i, a := range s.addrs {
		wg.Go(func() {
			sc := redis.NewSentinelClient(&redis.Options{Addr: a, TLSConfig: s.tls, DialTimeout: s.timeout, ReadTimeout: s.timeout,
				WriteTimeout: s.timeout, MaxRetries: -1, PoolSize: 1, ContextTimeoutEnabled: true})
			defer sc.Close()
			// The epoch from SENTINEL MASTER; the address from
			// GET-MASTER-ADDR-BY-NAME, which names the promoted replica
			// as soon as it is one, where SENTINEL MASTER still names
			// the old primary until the failover has reconfigured the
			// other replicas.
			m, err := sc.Master(ctx, s.master).Result()
			if err != nil {
				answers[i].err = fmt.Errorf("sentinel %s: %w", a, err)
				return
			}
			epoch, err := strconv.ParseInt(m["config-epoch"], 10, 64)
			if err != nil {
				answers[i].err = fmt.Errorf("sentinel %s: master %q: no config-epoch in %v", a, s.master, m)
				return
			}
			hp, err := sc.GetMasterAddrByName(ctx, s.master).Result()
			if err != nil || len(hp) != 2 {
				answers[i].err = fmt.Errorf("sentinel %s: get-master-addr-by-name %q: %v %w", a, s.master, hp, err)
				return
			}
			answers[i] = answer{addr: net.JoinHostPort(hp[0], hp[1]), epoch: epoch}
		})
	}
	wg.Wait()
	var best *answer
	var errs []error
	for i := range answers {
		a := &answers[i]
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		if best == nil || cmp.Compare(a.epoch, best.epoch) > 0 {
			best = a
		}
	}
	if best == nil {
		return "", fmt.Errorf("store: sentinel: no Sentinel of %s named master %q: %w", strings.Join(s.addrs, ","), s.master, errors.Join(errs...))
	}
	return best.addr, nil
}

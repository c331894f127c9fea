package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeTimeout is the Cluster's cluster-node-timeout and the Sentinels'
// down-after-milliseconds: how long a primary may be silent before it is
// taken for dead and its replica promoted.
const NodeTimeout = time.Second

// Cluster is a real Redis Cluster on loopback: three primaries with a
// replica each, created by redis-cli --cluster create, as operators
// create one.
type Cluster struct {
	t     testing.TB
	Nodes []*Server
}

// StartCluster runs a Redis Cluster of three primaries and three replicas
// (six redis-server --cluster-enabled yes on free ports, each with its
// bus on another free port), waits until every node reports
// cluster_state:ok, and stops it in t.Cleanup.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	need(t, "redis-server")
	need(t, "redis-cli")
	c := &Cluster{t: t}
	for range 6 {
		c.Nodes = append(c.Nodes, startNode(t))
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitReplicated()
	return c
}

// startNode runs one empty cluster-enabled node.
func startNode(t testing.TB) *Server {
	return startServer(t, []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", fmt.Sprint(NodeTimeout.Milliseconds())},
		// The bus port is by default the port + 10000, which may be
		// taken or beyond 65535: another free port instead.
		func(*Server) []string {
			_, bus, _ := net.SplitHostPort(freeAddr(t))
			return []string{"--cluster-port", bus}
		})
}

// Addrs are the nodes' addresses, the seeds a client is given.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Addr)
	}
	return out
}

// waitOK waits until each of nodes reports cluster_state:ok and agrees
// on who serves every slot.
func (c *Cluster) waitOK(nodes []*Server) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, n := range nodes {
			info, err := command(n.Addr, "CLUSTER", "INFO")
			if err != nil || !strings.Contains(fmt.Sprint(info), "cluster_state:ok") {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the cluster is not ok after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Shard is one slot's primary and its replicas.
type Shard struct {
	Primary  *Server
	Replicas []*Server
}

// ShardOf asks a running node which nodes serve key's slot now.
func (c *Cluster) ShardOf(key string) (Shard, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: n.Addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		slot, err := rc.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			rc.Close()
			continue
		}
		slots, err := rc.ClusterSlots(context.Background()).Result()
		rc.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				sh := Shard{Primary: c.node(s.Nodes[0].Addr)}
				for _, r := range s.Nodes[1:] {
					sh.Replicas = append(sh.Replicas, c.node(r.Addr))
				}
				if sh.Primary == nil {
					return Shard{}, fmt.Errorf("slot %d: primary %s is not one of the nodes", slot, s.Nodes[0].Addr)
				}
				return sh, nil
			}
		}
		return Shard{}, fmt.Errorf("slot %d is served by no node", slot)
	}
	return Shard{}, fmt.Errorf("no node answers")
}

func (c *Cluster) node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Promoted waits until one of candidates says it is a primary and the
// cluster is ok by its account — the topology's own recovery after its
// primary's loss — and returns when it first said so (polled every 5ms).
func Promoted(t testing.TB, limit time.Duration, candidates ...*Server) (*Server, time.Time) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, n := range candidates {
			if !n.Running() || !isPrimary(n.Addr) {
				continue
			}
			if info, err := command(n.Addr, "CLUSTER", "INFO"); err == nil && strings.Contains(fmt.Sprint(info), "cluster_state:ok") {
				return n, time.Now()
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("none of %d candidates became a primary within %v", len(candidates), limit)
	return nil, time.Time{}
}

// AddNode starts an empty node, joins it to the cluster as a primary
// (redis-cli --cluster add-node) and moves key's slot to it, keys and all,
// as redis-cli --cluster reshard does: the slot marked importing and
// migrating, its keys migrated, then the slot given to the new node.
// It returns the new node once every node agrees.
func (c *Cluster) AddNode(key string) *Server {
	c.t.Helper()
	n := startNode(c.t)
	var seed *Server
	for _, o := range c.Nodes {
		if o.Running() {
			seed = o
			break
		}
	}
	if out, err := exec.Command("redis-cli", "--cluster", "add-node", n.Addr, seed.Addr).CombinedOutput(); err != nil {
		c.t.Fatalf("redis-cli --cluster add-node: %v\n%s", err, out)
	}
	c.Nodes = append(c.Nodes, n)
	live := slices.DeleteFunc(slices.Clone(c.Nodes), func(s *Server) bool { return !s.Running() })
	// Every node must know every other before the slot can move.
	deadline := time.Now().Add(30 * time.Second)
	for {
		known := 0
		for _, o := range live {
			out, err := command(o.Addr, "CLUSTER", "INFO")
			if err == nil && strings.Contains(fmt.Sprint(out), "cluster_known_nodes:"+fmt.Sprint(len(live))+"\r") {
				known++
			}
		}
		if known == len(live) {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the nodes do not all know the new node after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitOK(live)
	must := func(v any, err error) any {
		c.t.Helper()
		if err != nil {
			c.t.Fatal(err)
		}
		return v
	}
	sh, err := c.ShardOf(key)
	if err != nil {
		c.t.Fatal(err)
	}
	src := sh.Primary
	slot := must(command(src.Addr, "CLUSTER", "KEYSLOT", key))
	srcID, dstID := must(command(src.Addr, "CLUSTER", "MYID")), must(command(n.Addr, "CLUSTER", "MYID"))
	must(command(n.Addr, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID))
	must(command(src.Addr, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID))
	host, port, _ := net.SplitHostPort(n.Addr)
	for {
		keys, err := command(src.Addr, "CLUSTER", "GETKEYSINSLOT", slot, 100)
		if err != nil {
			c.t.Fatal(err)
		}
		ks, _ := keys.([]any)
		if len(ks) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		args = append(args, ks...)
		must(command(src.Addr, args...))
	}
	// The new owner first, then the old, then the other primaries (the
	// replicas learn it from them).
	must(command(n.Addr, "CLUSTER", "SETSLOT", slot, "NODE", dstID))
	must(command(src.Addr, "CLUSTER", "SETSLOT", slot, "NODE", dstID))
	for _, o := range live {
		if o != n && o != src && isPrimary(o.Addr) {
			must(command(o.Addr, "CLUSTER", "SETSLOT", slot, "NODE", dstID))
		}
	}
	c.waitOK(live)
	return n
}

// Sentinel is a real Sentinel deployment on loopback: a primary, a
// replica of it, and three Sentinels monitoring them under the name
// Master with a quorum of two.
type Sentinel struct {
	t         testing.TB
	Master    string
	Nodes     []*Server // the primary first, as started
	Sentinels []*Server
}

// StartSentinel runs the primary, its replica and three Sentinels, waits
// until every Sentinel knows the replica and the other Sentinels, and
// stops them all in t.Cleanup.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	need(t, "redis-server")
	s := &Sentinel{t: t, Master: "sluice"}
	primary := startServer(t, nil)
	host, port, _ := net.SplitHostPort(primary.Addr)
	replica := startServer(t, []string{"--replicaof", host, port})
	s.Nodes = []*Server{primary, replica}
	for range 3 {
		s.Sentinels = append(s.Sentinels, s.startSentinel(primary.Addr))
	}
	deadline := time.Now().Add(30 * time.Second)
	for !s.settled(primary) {
		if time.Now().After(deadline) {
			t.Fatal("the Sentinels do not know the replica and each other after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// startSentinel runs a Sentinel monitoring the master at addr.
func (s *Sentinel) startSentinel(addr string) *Server {
	s.t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	return startServer(s.t, nil, func(n *Server) []string {
		conf := fmt.Sprintf("sentinel monitor %s %s %s 2\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s 2000\n"+
			"sentinel parallel-syncs %s 1\n", s.Master, host, port, s.Master, NodeTimeout.Milliseconds(), s.Master, s.Master)
		if err := os.WriteFile(filepath.Join(n.dir, "sentinel.conf"), []byte(conf), 0o600); err != nil {
			s.t.Fatal(err)
		}
		return []string{"--sentinel"}
	})
}

// StaleSentinel runs a Sentinel of its own that monitors the master at
// addr and knows no other Sentinel: after a failover it still names addr,
// at the configuration epoch it started with, as a Sentinel cut off from
// the others during the failover would.
func (s *Sentinel) StaleSentinel(addr string) *Server {
	s.t.Helper()
	return s.startSentinel(addr)
}

// settled: every Sentinel names primary as the master, knows a replica
// online and the two other Sentinels.
func (s *Sentinel) settled(primary *Server) bool {
	for _, sn := range s.Sentinels {
		if addr, err := s.masterAddr(sn); err != nil || addr != primary.Addr {
			return false
		}
		m, err := command(sn.Addr, "SENTINEL", "MASTER", s.Master)
		if err != nil {
			return false
		}
		f := fields(m)
		if f["num-slaves"] != "1" || f["num-other-sentinels"] != "2" {
			return false
		}
		reps, err := command(sn.Addr, "SENTINEL", "REPLICAS", s.Master)
		if err != nil {
			return false
		}
		rs, _ := reps.([]any)
		if len(rs) != 1 || !strings.Contains(fields(rs[0])["flags"], "slave") || strings.Contains(fields(rs[0])["flags"], "down") ||
			fields(rs[0])["master-link-status"] != "ok" {
			return false
		}
	}
	return true
}

// fields reads a Sentinel's flat list (or map) of names and values.
func fields(v any) map[string]string {
	out := map[string]string{}
	switch v := v.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			out[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any:
		for k, x := range v {
			out[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	}
	return out
}

func (s *Sentinel) masterAddr(sn *Server) (string, error) {
	v, err := command(sn.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Master)
	if err != nil {
		return "", err
	}
	hp, ok := v.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("get-master-addr-by-name: %v", v)
	}
	return net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1])), nil
}

// Addrs are the Sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	var out []string
	for _, n := range s.Sentinels {
		out = append(out, n.Addr)
	}
	return out
}

// Primary is the node the Sentinels' majority names as the primary now.
func (s *Sentinel) Primary() *Server {
	s.t.Helper()
	votes := map[string]int{}
	for _, sn := range s.Sentinels {
		if a, err := s.masterAddr(sn); err == nil {
			votes[a]++
		}
	}
	for _, n := range s.Nodes {
		if votes[n.Addr] >= 2 {
			return n
		}
	}
	s.t.Fatalf("no primary named by two Sentinels: %v", votes)
	return nil
}

// Promoted waits until a Sentinel names a node other than old as the
// primary and that node says it is one — the topology's own recovery —
// and returns it and when that was first seen (polled every 5ms).
func (s *Sentinel) Promoted(old *Server, limit time.Duration) (*Server, time.Time) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, sn := range s.Sentinels {
			a, err := s.masterAddr(sn)
			if err != nil || a == old.Addr {
				continue
			}
			for _, n := range s.Nodes {
				if n.Addr == a && n.Running() && isPrimary(n.Addr) {
					return n, time.Now()
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.t.Fatalf("no Sentinel named a new primary within %v", limit)
	return nil, time.Time{}
}

// Rejoin restarts n (killed) as a replica of the current primary — as
// the configuration an operator restarts it with would say; the Sentinels
// would make it one too, but only some twenty seconds after they see it
// back as a primary — and waits until every Sentinel knows it as a
// replica in sync: the deployment can lose its primary again.
func (s *Sentinel) Rejoin(n *Server, limit time.Duration) {
	s.t.Helper()
	n.Restart()
	host, port, _ := net.SplitHostPort(s.Primary().Addr)
	if _, err := command(n.Addr, "REPLICAOF", host, port); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(limit)
	for !s.settled(s.Primary()) {
		if time.Now().After(deadline) {
			s.t.Fatalf("the restarted node is not a replica in sync within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isPrimary: ROLE says master.
func isPrimary(addr string) bool {
	v, err := command(addr, "ROLE")
	r, _ := v.([]any)
	return err == nil && len(r) > 0 && r[0] == "master"
}

// command sends one command to one node, with a short timeout.
func command(addr string, args ...any) (any, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond, MaxRetries: -1, Protocol: 2})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return rc.Do(ctx, args...).Result()
}

// WaitReplicated waits until every slot range has a running primary and
// a running replica whose link to it is up, and every running node says
// the cluster is ok: the cluster can lose any primary (again, after a
// killed node's restart).
func (c *Cluster) WaitReplicated() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !c.replicated() {
		if time.Now().After(deadline) {
			c.t.Fatalf("a shard has no replica in sync after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitOK(slices.DeleteFunc(slices.Clone(c.Nodes), func(s *Server) bool { return !s.Running() }))
}

func (c *Cluster) replicated() bool {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		v, err := command(n.Addr, "CLUSTER", "SLOTS")
		ranges, _ := v.([]any)
		if err != nil || len(ranges) == 0 {
			return false
		}
		for _, r := range ranges {
			f, _ := r.([]any)
			if len(f) < 4 {
				return false // no replica listed
			}
			synced := false
			for _, node := range f[3:] {
				hp, _ := node.([]any)
				if len(hp) < 2 {
					continue
				}
				addr := net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1]))
				info, err := command(addr, "INFO", "replication")
				if s := c.node(addr); s != nil && s.Running() && err == nil && strings.Contains(fmt.Sprint(info), "master_link_status:up") {
					synced = true
				}
			}
			if !synced {
				return false
			}
		}
		return true
	}
	return false
}

// Command kfake-target serves a franz-go kfake cluster for kipcheck's kfake target.
//
// Protocol with the Python provider (targets/kfake/provider.py): once listening it prints
// one line "ready bootstrap=H:P,... node_ids=0,1,..." on stdout, then reads commands from
// stdin, one per line, answering each with "ok ..." or "err ...":
//
//	kill ID           close node ID's listener and connections (kfake RemoveNode: leaders move)
//	restart ID        bring node ID back on its old port (kfake AddNode)
//	topic NAME PARTS  create a topic (kfake CreateTopic)
//	hold KEY MS N     hold the next N requests of api KEY for MS ms each, then serve them
//	                  normally (N = -1: every one until "clear"; kfake ControlKey + SleepControl)
//	fail KEY CODE N   answer the next N requests of api KEY with error CODE instead of serving
//	                  them (N = -1: until "clear"; kfake Fault, top-level code where there is one)
//	clear             drop every hold and fail installed so far; held requests are released
//
// EOF on stdin, SIGTERM or SIGINT closes the cluster and exits 0: the process lives exactly
// as long as its parent holds the pipe, so a crashed test run never leaks a broker.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type configFlag map[string]string

func (f configFlag) String() string { return "" }

func (f configFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("expected key=value, got %q", s)
	}
	f[k] = v
	return nil
}

func main() {
	nodes := flag.Int("nodes", 1, "number of brokers")
	partitions := flag.Int("partitions", 1, "partitions of auto-created topics (Kafka's num.partitions)")
	ports := flag.String("ports", "", "comma-separated ports, one per broker (a restart after a crash reuses them)")
	configs := make(configFlag)
	flag.Var(configs, "broker-config", "broker config key=value (repeatable)")
	flag.Parse()

	conns := newConnTracker()
	opts := []kfake.Opt{
		kfake.NumBrokers(*nodes),
		kfake.ListenFn(conns.listen),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions),
	}
	if *ports != "" {
		var ps []int
		for _, p := range strings.Split(*ports, ",") {
			n, err := strconv.Atoi(p)
			if err != nil {
				fmt.Fprintf(os.Stderr, "kfake: bad -ports %q\n", *ports)
				os.Exit(2)
			}
			ps = append(ps, n)
		}
		opts = append(opts, kfake.Ports(ps...))
	}
	if len(configs) > 0 {
		opts = append(opts, kfake.BrokerConfigs(configs))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake: cannot start: %v\n", err)
		os.Exit(2)
	}
	ctl := &controller{c: c, conns: conns, ports: map[int32]int{}, cleared: make(chan struct{})}
	addrs := c.ListenAddrs()
	ids := make([]string, len(addrs))
	for i, addr := range addrs { // NewCluster numbers its brokers 0..n-1 in ListenAddrs order
		_, port, _ := net.SplitHostPort(addr)
		ctl.ports[int32(i)], _ = strconv.Atoi(port)
		ids[i] = strconv.Itoa(i)
	}
	fmt.Printf("ready bootstrap=%s node_ids=%s\n", strings.Join(addrs, ","), strings.Join(ids, ","))

	done := make(chan struct{})
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
		<-sigs
		close(done)
	}()
	go func() {
		ctl.serve(bufio.NewScanner(os.Stdin), os.Stdout)
		close(done)
	}()
	<-done
	c.Close()
}

type controller struct {
	c     *kfake.Cluster
	conns *connTracker
	ports map[int32]int

	mu      sync.Mutex
	faults  []*kfake.FaultHandle
	cleared chan struct{} // closed by "clear": wakes held requests, retires their controls
}

func (ctl *controller) serve(in *bufio.Scanner, out *os.File) {
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) == 0 {
			continue
		}
		if err := ctl.run(fields); err != nil {
			fmt.Fprintf(out, "err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Fprintln(out, "ok")
		}
	}
}

func (ctl *controller) run(f []string) error {
	switch {
	case f[0] == "kill" && len(f) == 2:
		id, err := strconv.Atoi(f[1])
		if err != nil {
			return err
		}
		if err := ctl.c.RemoveNode(int32(id)); err != nil {
			return err
		}
		ctl.conns.drop(ctl.ports[int32(id)])
		return nil
	case f[0] == "restart" && len(f) == 2:
		id, err := strconv.Atoi(f[1])
		if err != nil {
			return err
		}
		port, ok := ctl.ports[int32(id)]
		if !ok {
			return fmt.Errorf("unknown node %d", id)
		}
		_, _, err = ctl.c.AddNode(int32(id), port)
		return err
	case f[0] == "topic" && len(f) == 3:
		parts, err := strconv.Atoi(f[2])
		if err != nil {
			return err
		}
		return ctl.c.CreateTopic(f[1], int32(parts), nil)
	case (f[0] == "hold" || f[0] == "fail") && len(f) == 4:
		n, err := ints(f[1:])
		if err != nil {
			return err
		}
		if n[2] == 0 || n[2] < -1 {
			return fmt.Errorf("count must be positive or -1, got %d", n[2])
		}
		if f[0] == "hold" {
			return ctl.hold(int16(n[0]), time.Duration(n[1])*time.Millisecond, n[2])
		}
		return ctl.fail(int16(n[0]), int16(n[1]), n[2])
	case f[0] == "clear" && len(f) == 1:
		ctl.clear()
		return nil
	}
	return fmt.Errorf("unknown command %q", strings.Join(f, " "))
}

func ints(fields []string) ([]int, error) {
	out := make([]int, len(fields))
	for i, s := range fields {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// hold delays the next n requests of api key by d each and then lets kfake serve them as
// usual: the control never answers (returns not handled), it only sleeps the request, which
// SleepControl does without blocking other connections.
func (ctl *controller) hold(key int16, d time.Duration, n int) error {
	if kmsg.RequestForKey(key) == nil {
		return fmt.Errorf("unknown api key %d", key)
	}
	if d < 0 {
		return fmt.Errorf("negative hold %s", d)
	}
	ctl.mu.Lock()
	cleared := ctl.cleared
	ctl.mu.Unlock()
	var left atomic.Int64
	left.Store(int64(n))
	ctl.c.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-cleared:
			ctl.c.DropControl()
			return nil, nil, false
		default:
		}
		if n > 0 && left.Add(-1) <= 0 {
			ctl.c.DropControl() // dropped before sleeping: later requests pass untouched
		}
		ctl.c.SleepControl(func() {
			select {
			case <-time.After(d):
			case <-cleared:
			}
		})
		return nil, nil, false
	})
	return nil
}

// fail answers the next n requests of api key with error code instead of serving them.
func (ctl *controller) fail(key, code int16, n int) error {
	if kmsg.RequestForKey(key) == nil {
		return fmt.Errorf("unknown api key %d", key)
	}
	typed := kerr.TypedErrorForCode(code)
	if typed == nil || typed.Code != code {
		return fmt.Errorf("unknown error code %d", code)
	}
	h := ctl.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Key(key)}, Err: typed, Count: n, TopLevel: true})
	ctl.mu.Lock()
	ctl.faults = append(ctl.faults, h)
	ctl.mu.Unlock()
	return nil
}

// clear removes every fault, wakes every held request and retires the hold controls.
func (ctl *controller) clear() {
	ctl.mu.Lock()
	faults, cleared := ctl.faults, ctl.cleared
	ctl.faults, ctl.cleared = nil, make(chan struct{})
	ctl.mu.Unlock()
	for _, h := range faults {
		h.Remove()
	}
	close(cleared)
}

// connTracker remembers the connections each listener accepted, so that killing a node can
// close them: kfake's RemoveNode closes only the listener, and clients would keep talking to
// a "dead" broker over connections they already hold.
type connTracker struct {
	mu    sync.Mutex
	conns map[int]map[net.Conn]struct{}
}

func newConnTracker() *connTracker { return &connTracker{conns: map[int]map[net.Conn]struct{}{}} }

func (t *connTracker) listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &trackedListener{Listener: ln, t: t, port: ln.Addr().(*net.TCPAddr).Port}, nil
}

func (t *connTracker) add(port int, c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns[port] == nil {
		t.conns[port] = map[net.Conn]struct{}{}
	}
	t.conns[port][c] = struct{}{}
}

func (t *connTracker) remove(port int, c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns[port], c)
}

func (t *connTracker) drop(port int) {
	t.mu.Lock()
	conns := t.conns[port]
	delete(t.conns, port)
	t.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

type trackedListener struct {
	net.Listener
	t    *connTracker
	port int
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.t.add(l.port, c)
	return &trackedConn{Conn: c, t: l.t, port: l.port}, nil
}

type trackedConn struct {
	net.Conn
	t    *connTracker
	port int
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.t.remove(c.port, c.Conn) })
	return c.Conn.Close()
}

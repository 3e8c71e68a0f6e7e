// fake-aws serves fakeaws (an in-memory fake of the EC2 and classic ELB
// query APIs, with a test-control endpoint under /control/) on loopback,
// and writes the cloud config that points k8s.io/cloud-provider-aws at it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ccm-rs/ccm-rs/tests/real-ccm/aws/fakeaws"
)

type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on (loopback)")
	clusterID := flag.String("cluster-id", "", "the cluster id its resources are tagged for (required)")
	cloudConfig := flag.String("cloud-config", "", "write the AWS cloud config for this fake here (after listening)")
	addressFile := flag.String("address-file", "", "write the base URL here once serving (written whole, after listening)")
	var instances names
	flag.Var(&instances, "instance", "a running instance with this private DNS name (repeatable)")
	flag.Parse()

	cloud, err := fakeaws.New(fakeaws.Config{ClusterID: *clusterID})
	if err != nil {
		log.Fatal(err)
	}
	for _, n := range instances {
		if _, err := cloud.AddInstance(fakeaws.Instance{PrivateDNSName: n}); err != nil {
			log.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	if *cloudConfig != "" {
		if err := writeFile(*cloudConfig, fakeaws.CloudConfig(cloud, base)); err != nil {
			log.Fatal(err)
		}
	}
	if *addressFile != "" {
		if err := writeFile(*addressFile, base+"\n"); err != nil {
			log.Fatal(err)
		}
	}
	srv := &http.Server{Handler: cloud, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("fake-aws: serving %s (cluster %s)", base, *clusterID)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// writeFile writes whole or not at all: a reader polling for the file never
// sees half of it.
func writeFile(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fake-aws-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

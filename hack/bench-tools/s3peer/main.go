// Command s3peer is the benchmark's peer for warmd's weight prefetch (scripts/bench/weights.sh):
//
//	s3peer tm -endpoint URL -bucket B -dest DIR      aws-sdk-go-v2 transfermanager DownloadDirectory
//	                                                 with GetObjectType=GetObjectRanges, its defaults otherwise
//	s3peer ceiling -endpoint URL -bucket B           parallel ranged GETs to io.Discard: the network-side
//	                                                 ceiling (no disk) on this machine
//
// Credentials come from the default AWS chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the bench).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: s3peer tm|ceiling -endpoint URL -bucket B [-dest DIR] [-concurrency N] [-chunk BYTES]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	endpoint := fs.String("endpoint", "", "S3 endpoint")
	bucket := fs.String("bucket", "", "bucket")
	dest := fs.String("dest", "", "destination dir (tm)")
	conc := fs.Int("concurrency", 16, "ranged GETs in flight (ceiling)")
	chunk := fs.Int64("chunk", 16<<20, "bytes per ranged GET (ceiling)")
	fs.Parse(os.Args[2:])
	ctx := context.Background()
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion("us-east-1"),
		awsconfig.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		awsconfig.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired))
	if err != nil {
		fail(err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = endpoint
		o.UsePathStyle = true
	})
	start := time.Now()
	var n int64
	switch os.Args[1] {
	case "tm":
		tm := transfermanager.New(client, func(o *transfermanager.Options) { o.GetObjectType = tmtypes.GetObjectRanges })
		out, err := tm.DownloadDirectory(ctx, &transfermanager.DownloadDirectoryInput{Bucket: bucket, Destination: dest})
		if err != nil {
			fail(err)
		}
		n = out.ObjectsDownloaded
	case "ceiling":
		n, err = ceiling(ctx, client, *bucket, *conc, *chunk)
		if err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
	fmt.Printf("%s: %d in %.3fs\n", os.Args[1], n, time.Since(start).Seconds())
}

func ceiling(ctx context.Context, c *s3.Client, bucket string, conc int, chunk int64) (int64, error) {
	type task struct {
		key      string
		off, len int64
	}
	var tasks []task
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		for _, o := range page.Contents {
			for off := int64(0); off < aws.ToInt64(o.Size); off += chunk {
				tasks = append(tasks, task{aws.ToString(o.Key), off, min(chunk, aws.ToInt64(o.Size)-off)})
			}
		}
	}
	ch := make(chan task)
	var total atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for t := range ch {
				rng := fmt.Sprintf("bytes=%d-%d", t.off, t.off+t.len-1)
				out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &t.key, Range: &rng})
				if err == nil {
					// A plain read loop: io.Copy into io.Discard would use Discard's own 8 KiB
					// ReadFrom buffers and understate the ceiling.
					for {
						n, rerr := out.Body.Read(buf)
						total.Add(int64(n))
						if rerr != nil {
							if rerr != io.EOF {
								err = rerr
							}
							break
						}
					}
					out.Body.Close()
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		}()
	}
	for _, t := range tasks {
		ch <- t
	}
	close(ch)
	wg.Wait()
	return total.Load(), firstErr
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "s3peer:", err)
	os.Exit(1)
}

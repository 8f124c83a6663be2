// Command s3peer holds the benchmark's helpers for warmd's weight prefetch (scripts/bench/weights.sh):
//
//	s3peer upload -endpoint URL -bucket B -src DIR [-part BYTES] [-alg CRC64NVME]
//	                  creates the bucket and uploads every file under DIR through S3, as a real upload
//	                  does: PutObject, or a multipart upload over -part bytes, with a FULL_OBJECT
//	                  checksum of -alg, so each object carries the checksum a downloader can verify
//	s3peer tm -endpoint URL -bucket B -dest DIR [-concurrency N] [-part BYTES]
//	                  aws-sdk-go-v2 transfermanager DownloadDirectory with GetObjectType=GetObjectRanges;
//	                  -concurrency is its Concurrency (objects in flight, and ranged GETs per object),
//	                  -part its PartSizeBytes; 0 keeps the SDK's defaults (5, 8 MiB)
//	s3peer ceiling -endpoint URL -bucket B [-concurrency N] [-chunk BYTES]
//	                  parallel ranged GETs to io.Discard: the network-side ceiling (no disk) here
//	s3peer fsync|drop|read DIR...
//	                  the bench's own file operations on the regular files under DIR (links followed
//	                  for read, so warmd's snapshot reads its blobs): fsync each; fsync then
//	                  posix_fadvise(POSIX_FADV_DONTNEED) each (drops only these files from the page
//	                  cache, never the machine's); read each once sequentially, as safetensors loading does
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
		fmt.Fprintln(os.Stderr, "usage: s3peer upload|tm|ceiling -endpoint URL -bucket B ... | s3peer fsync|drop|read DIR...")
		os.Exit(2)
	}
	mode := os.Args[1]
	switch mode {
	case "fsync", "drop", "read":
		start := time.Now()
		n, err := files(mode, os.Args[2:])
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s: %d bytes in %.3fs\n", mode, n, time.Since(start).Seconds())
		return
	}
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	endpoint := fs.String("endpoint", "", "S3 endpoint")
	bucket := fs.String("bucket", "", "bucket")
	dest := fs.String("dest", "", "destination dir (tm)")
	src := fs.String("src", "", "source dir (upload)")
	alg := fs.String("alg", "CRC64NVME", "full-object checksum algorithm (upload)")
	conc := fs.Int("concurrency", 0, "tm: Concurrency (0: SDK default); ceiling: ranged GETs in flight (0: 16)")
	part := fs.Int64("part", 0, "tm: PartSizeBytes (0: SDK default); upload: multipart part size (0: 64 MiB)")
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
	switch mode {
	case "upload":
		n, err = upload(ctx, client, *bucket, *src, *alg, *part)
	case "tm":
		tm := transfermanager.New(client, func(o *transfermanager.Options) {
			o.GetObjectType = tmtypes.GetObjectRanges
			if *conc > 0 {
				o.Concurrency = *conc
			}
			if *part > 0 {
				o.PartSizeBytes = *part
			}
		})
		var out *transfermanager.DownloadDirectoryOutput
		if out, err = tm.DownloadDirectory(ctx, &transfermanager.DownloadDirectoryInput{Bucket: bucket, Destination: dest}); err == nil {
			n = out.ObjectsDownloaded
		}
	case "ceiling":
		if *conc <= 0 {
			*conc = 16
		}
		n, err = ceiling(ctx, client, *bucket, *conc, *chunk)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s: %d in %.3fs\n", mode, n, time.Since(start).Seconds())
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

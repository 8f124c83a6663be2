package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"warmd.io/warmd/pkg/bounded"
	"warmd.io/warmd/pkg/config"
)

// Checksum modes for Options.Checksums.
const (
	// ChecksumsAuto: WhenRequired for a custom endpoint (many S3-compatible stores reject or mangle
	// the SDK's default CRC trailers), WhenSupported for AWS S3. AWS_REQUEST_CHECKSUM_CALCULATION and
	// AWS_RESPONSE_CHECKSUM_VALIDATION, when set, win over auto.
	ChecksumsAuto = ""
	// ChecksumsWhenSupported sends and validates CRC checksums whenever the operation allows.
	ChecksumsWhenSupported = "when_supported"
	// ChecksumsWhenRequired sends and validates them only where the API requires it.
	ChecksumsWhenRequired = "when_required"
)

// Options tune the S3 client beyond what config.S3 says.
type Options struct {
	// MaxConns sizes the HTTP connection pool; set it to at least the caller's concurrency so
	// parallel ranged GETs reuse connections. Default 64.
	MaxConns int
	// Backoff is the retry policy of every operation. Default DefaultBackoff.
	Backoff Backoff
	// Checksums is ChecksumsAuto, ChecksumsWhenSupported or ChecksumsWhenRequired.
	Checksums string
	// Credentials overrides the default AWS chain; nil (production) uses the chain.
	Credentials aws.CredentialsProvider
	// OnRetry sees every retried error (metrics); may be nil.
	OnRetry func(op string, err error)
	Log     *slog.Logger
}

// S3 is the Store backed by aws-sdk-go-v2. Every answer it reads is bounded (bounds.go).
type S3 struct {
	client  *s3.Client
	backoff Backoff
	onRetry func(string, error)
	// maxKeys and maxPages bound one List (config s3.maxListKeys, s3.maxListPages).
	maxKeys, maxPages int
}

var _ Store = (*S3)(nil)

// NewS3 builds the shared S3 client. Credentials come from the default AWS chain (environment,
// shared config/credentials files and cfg.Profile, web identity/IRSA, EKS pod identity, IMDS).
//
// AWS_CA_BUNDLE: LoadDefaultConfig loads it into its own buildable HTTP client (and fails if handed a
// plain *http.Client), so the client is tuned on s3.Options by cloning that buildable client: the CA
// bundle keeps applying to S3 traffic and the pool is sized for parallel ranged GETs.
func NewS3(ctx context.Context, cfg config.S3, opts Options) (*S3, error) {
	if opts.MaxConns <= 0 {
		opts.MaxConns = 64
	}
	region := cfg.Region
	if region == "" {
		region = config.DefaultRegion
	}
	loads := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(region)}
	if cfg.Profile != "" {
		loads = append(loads, awsconfig.WithSharedConfigProfile(cfg.Profile))
	}
	if opts.Credentials != nil {
		loads = append(loads, awsconfig.WithCredentialsProvider(opts.Credentials))
	}
	mode := opts.Checksums
	if mode == ChecksumsAuto && cfg.Endpoint != "" {
		mode = ChecksumsWhenRequired
	}
	switch mode {
	case ChecksumsWhenRequired:
		if os.Getenv("AWS_REQUEST_CHECKSUM_CALCULATION") == "" || opts.Checksums != ChecksumsAuto {
			loads = append(loads, awsconfig.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired))
		}
		if os.Getenv("AWS_RESPONSE_CHECKSUM_VALIDATION") == "" || opts.Checksums != ChecksumsAuto {
			loads = append(loads, awsconfig.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired))
		}
	case ChecksumsWhenSupported:
		loads = append(loads, awsconfig.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenSupported),
			awsconfig.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenSupported))
	case ChecksumsAuto:
	default:
		return nil, fmt.Errorf("s3 checksum mode %q: use %q, %q or empty for auto", mode, ChecksumsWhenSupported, ChecksumsWhenRequired)
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config (region %s, profile %q): %w", region, cfg.Profile, err)
	}
	base, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok || base == nil {
		base = awshttp.NewBuildableClient()
	}
	n := opts.MaxConns
	httpClient := base.WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = 2 * n
		t.MaxIdleConnsPerHost = 2 * n
		// Each connection's bufio reader and writer. Bodies bypass both: ReadRange reads into the
		// caller's buffer (a read at least this big goes straight to the socket), and a request body
		// goes to the socket once the headers are flushed. So these hold headers and small answers,
		// and 64 KiB each (not 256) keeps 16 ranged GETs in flight to 2 MiB of buffers, not 8.
		t.ReadBufferSize = 64 << 10
		t.WriteBufferSize = 64 << 10
		t.DisableCompression = true
		t.IdleConnTimeout = 90 * time.Second
	}).WithTimeout(0) // bodies of big ranges take as long as they take; the stall bound and ctx bound them
	stall := cfg.StallTimeout.Duration
	if stall <= 0 {
		stall = config.DefaultS3StallTimeout
	}
	// Every request stalls out, and error bodies are cut to a few KiB (bounds.go).
	bounds := &bounded.Client{Inner: httpClient, Stall: stall}
	pathStyle := cfg.Endpoint != ""
	if cfg.UsePathStyle != nil {
		pathStyle = *cfg.UsePathStyle
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.HTTPClient = bounds
		o.UsePathStyle = pathStyle
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		// One retry layer (ours, jittered, with short-read resume), not two multiplying each other.
		o.Retryer = aws.NopRetryer{}
		// Ranged GETs never carry a full-object checksum; that is expected, not log-worthy.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	onRetry := opts.OnRetry
	if onRetry == nil {
		onRetry = func(string, error) {}
	}
	if opts.Log != nil {
		log, inner := opts.Log, onRetry
		onRetry = func(op string, err error) {
			log.Debug("s3 retry", "op", op, "err", err)
			inner(op, err)
		}
	}
	maxKeys, maxPages := cfg.MaxListKeys, cfg.MaxListPages
	if maxKeys <= 0 {
		maxKeys = config.DefaultMaxListKeys
	}
	if maxPages <= 0 {
		maxPages = config.DefaultMaxListPages
	}
	return &S3{client: client, backoff: opts.Backoff, onRetry: onRetry, maxKeys: maxKeys, maxPages: maxPages}, nil
}

// Client exposes the SDK client for callers that need an operation Store lacks (multipart
// uploads in tests, transfer-manager comparisons in benchmarks).
func (c *S3) Client() *s3.Client { return c.client }

func (c *S3) retry(ctx context.Context, op string, f func(attempt int) error) error {
	return c.backoff.Do(ctx, f, func(err error) { c.onRetry(op, err) })
}

// List implements Store. The listing is bounded (bounds.go): at most maxKeys keys and maxPages
// pages, a page body of at most maxPageBytes, and a continuation token or a whole page of keys seen
// before fails it as a loop.
func (c *S3) List(ctx context.Context, bucket, prefix string) ([]Object, error) {
	var out []Object
	var token *string
	l := newListing(c.maxKeys, c.maxPages)
	pctx := bounded.WithBodyLimit(ctx, maxPageBytes)
	for {
		var page *s3.ListObjectsV2Output
		err := c.retry(ctx, "list", func(int) error {
			var err error
			page, err = c.client.ListObjectsV2(pctx, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix, ContinuationToken: token})
			return mapErr(err)
		})
		if err != nil {
			return nil, fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
		}
		if err := l.page(len(page.Contents)); err != nil {
			return nil, fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
		}
		fresh := 0
		for _, o := range page.Contents {
			obj := Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ETag: trimETag(aws.ToString(o.ETag)), LastModified: aws.ToTime(o.LastModified)}
			if len(o.ChecksumAlgorithm) > 0 {
				obj.Checksum.Algorithm = string(o.ChecksumAlgorithm[0])
				obj.Checksum.Composite = o.ChecksumType == types.ChecksumTypeComposite
			}
			if l.key(obj.Key) {
				fresh++
			}
			out = append(out, obj)
		}
		if !aws.ToBool(page.IsTruncated) || page.NextContinuationToken == nil {
			return out, nil
		}
		if err := l.next(len(page.Contents), fresh, aws.ToString(page.NextContinuationToken)); err != nil {
			return nil, fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
		}
		token = page.NextContinuationToken
	}
}

// Head implements Store; it asks for the stored checksum (ChecksumMode ENABLED).
func (c *S3) Head(ctx context.Context, bucket, key string) (Object, error) {
	var h *s3.HeadObjectOutput
	err := c.retry(ctx, "head", func(int) error {
		var err error
		h, err = c.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key, ChecksumMode: types.ChecksumModeEnabled})
		return mapErr(err)
	})
	if err != nil {
		return Object{}, fmt.Errorf("head s3://%s/%s: %w", bucket, key, err)
	}
	o := Object{Key: key, Size: aws.ToInt64(h.ContentLength), ETag: trimETag(aws.ToString(h.ETag)), LastModified: aws.ToTime(h.LastModified)}
	for _, cs := range []struct {
		alg string
		v   *string
	}{{"CRC64NVME", h.ChecksumCRC64NVME}, {"CRC32C", h.ChecksumCRC32C}, {"CRC32", h.ChecksumCRC32}, {"SHA256", h.ChecksumSHA256}, {"SHA1", h.ChecksumSHA1}} {
		if v := aws.ToString(cs.v); v != "" {
			o.Checksum = Checksum{Algorithm: cs.alg, Value: v, Composite: h.ChecksumType == types.ChecksumTypeComposite || strings.Contains(v, "-")}
			break
		}
	}
	return o, nil
}

// ReadRange implements Store.
func (c *S3) ReadRange(ctx context.Context, bucket, key string, off int64, buf []byte) error {
	done := 0
	err := c.retry(ctx, "get", func(int) error {
		if done == len(buf) {
			return nil
		}
		start := off + int64(done)
		rng := fmt.Sprintf("bytes=%d-%d", start, off+int64(len(buf))-1)
		want := int64(len(buf) - done)
		out, err := c.client.GetObject(bounded.WithBodyLimit(ctx, want), &s3.GetObjectInput{Bucket: &bucket, Key: &key, Range: &rng})
		if err != nil {
			return mapErr(err)
		}
		defer out.Body.Close()
		if err := checkGet(out, start, want); err != nil {
			return err
		}
		n, err := io.ReadFull(out.Body, buf[done:])
		if err == nil {
			err = atEnd(out.Body)
		}
		done += n
		if err != nil {
			return fmt.Errorf("short read at byte %d of %d: %w", done, len(buf), err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("get s3://%s/%s range %d+%d: %w", bucket, key, off, len(buf), err)
	}
	return nil
}

// GetRange implements Store.
func (c *S3) GetRange(ctx context.Context, bucket, key string, off, n int64, w io.Writer) (int64, error) {
	var done int64
	err := c.retry(ctx, "get", func(int) error {
		if done == n {
			return nil
		}
		rng := fmt.Sprintf("bytes=%d-%d", off+done, off+n-1)
		out, err := c.client.GetObject(bounded.WithBodyLimit(ctx, n-done), &s3.GetObjectInput{Bucket: &bucket, Key: &key, Range: &rng})
		if err != nil {
			return mapErr(err)
		}
		defer out.Body.Close()
		if err := checkGet(out, off+done, n-done); err != nil {
			return err
		}
		// The body is limited to the range (bounded.WithBodyLimit): one that goes on past it fails
		// with ErrTooLong, which is not retried.
		m, err := io.Copy(w, out.Body)
		done += m
		if err != nil {
			if errors.Is(err, errWriter) || errors.Is(err, bounded.ErrTooLong) {
				return err
			}
			return fmt.Errorf("read body at byte %d of %d: %w", done, n, err)
		}
		if done < n {
			return fmt.Errorf("short body: %d of %d bytes: %w", done, n, io.ErrUnexpectedEOF)
		}
		return nil
	})
	if err != nil {
		return done, fmt.Errorf("get s3://%s/%s range %d+%d: %w", bucket, key, off, n, err)
	}
	return done, nil
}

// Get implements Store. A resumed read carries If-Match with the first response's ETag, so an object
// replaced mid-read fails instead of being spliced.
func (c *S3) Get(ctx context.Context, bucket, key string, w io.Writer) (int64, error) {
	var written int64
	var etag *string
	err := c.retry(ctx, "get", func(int) error {
		in := &s3.GetObjectInput{Bucket: &bucket, Key: &key, IfMatch: etag}
		if written > 0 {
			in.Range = aws.String(fmt.Sprintf("bytes=%d-", written))
		}
		out, err := c.client.GetObject(ctx, in)
		if err != nil {
			return mapErr(err)
		}
		defer out.Body.Close()
		if err := bounded.CheckEncoding(aws.ToString(out.ContentEncoding)); err != nil {
			return fmt.Errorf("%w; upload the object without Content-Encoding", err)
		}
		if written > 0 && !strings.HasPrefix(aws.ToString(out.ContentRange), fmt.Sprintf("bytes %d-", written)) {
			return fmt.Errorf("%w: resumed at byte %d, answered Content-Range %s", bounded.ErrRange, written, bounded.Text(aws.ToString(out.ContentRange), 96))
		}
		if etag == nil && out.ETag != nil {
			etag = out.ETag
		}
		n, err := io.Copy(w, out.Body)
		written += n
		if err != nil {
			return fmt.Errorf("read body after %d bytes: %w", written, err)
		}
		return nil
	})
	if errors.Is(err, ErrExists) {
		// 412 on a resumed read: If-Match failed, the object was replaced mid-read.
		return written, fmt.Errorf("get s3://%s/%s: the object changed while it was read (ETag no longer %s); read it again", bucket, key, aws.ToString(etag))
	}
	if err != nil {
		return written, fmt.Errorf("get s3://%s/%s: %w", bucket, key, err)
	}
	return written, nil
}

// Put implements Store.
func (c *S3) Put(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, opts PutOptions) error {
	in := &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: body, ContentLength: aws.Int64(size)}
	if opts.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	if opts.ChecksumAlgorithm != "" {
		in.ChecksumAlgorithm = types.ChecksumAlgorithm(opts.ChecksumAlgorithm)
	}
	err := c.retry(ctx, "put", func(attempt int) error {
		if attempt > 1 {
			if _, err := body.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("rewind body: %w", errors.Join(err, context.Canceled))
			}
		}
		_, err := c.client.PutObject(ctx, in)
		return mapErr(err)
	})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", bucket, key, err)
	}
	return nil
}

// Parts implements Store through GetObjectAttributes. The answer is bounded (bounds.go): at most
// MaxParts parts, numbered upwards, over pages whose marker moves on, each page body at most
// maxPageBytes; anything else fails with ErrListing before more is read.
func (c *S3) Parts(ctx context.Context, bucket, key string) ([]Part, error) {
	var parts []Part
	var marker *string
	pctx := bounded.WithBodyLimit(ctx, maxPageBytes)
	for {
		var out *s3.GetObjectAttributesOutput
		err := c.retry(ctx, "attributes", func(int) error {
			var err error
			out, err = c.client.GetObjectAttributes(pctx, &s3.GetObjectAttributesInput{
				Bucket: &bucket, Key: &key, PartNumberMarker: marker, MaxParts: aws.Int32(1000),
				ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesObjectParts, types.ObjectAttributesChecksum},
			})
			return mapErr(err)
		})
		if err != nil {
			return nil, fmt.Errorf("object parts of s3://%s/%s: %w", bucket, key, err)
		}
		op := out.ObjectParts
		if op == nil || (len(op.Parts) == 0 && marker == nil) {
			// Stores without part lists in GetObjectAttributes (versitygw) still answer
			// HEAD ?partNumber=N with the part's size and checksum, as AWS does.
			return c.partsByHead(ctx, bucket, key)
		}
		for _, p := range op.Parts {
			n := int(aws.ToInt32(p.PartNumber))
			sum, err := partChecksum(p.ChecksumCRC64NVME, p.ChecksumCRC32C, p.ChecksumCRC32, p.ChecksumSHA256, p.ChecksumSHA1)
			if err == nil {
				err = nextPart(parts, n)
			}
			if err != nil {
				return nil, fmt.Errorf("object parts of s3://%s/%s: %w", bucket, key, err)
			}
			parts = append(parts, Part{Number: n, Size: aws.ToInt64(p.Size), Checksum: sum})
		}
		if !aws.ToBool(op.IsTruncated) || op.NextPartNumberMarker == nil {
			return parts, nil
		}
		if len(op.Parts) == 0 || aws.ToString(op.NextPartNumberMarker) == aws.ToString(marker) {
			return nil, fmt.Errorf("object parts of s3://%s/%s: %w: the part list loops (a truncated page whose marker does not move on)", bucket, key, ErrListing)
		}
		marker = op.NextPartNumberMarker
	}
}

// partsByHead reads the parts one HEAD ?partNumber=N at a time, after checking the count the
// first HEAD gives against MaxParts; a count that changes between HEADs means the object changed.
func (c *S3) partsByHead(ctx context.Context, bucket, key string) ([]Part, error) {
	var parts []Part
	var count int32
	for n := int32(1); ; n++ {
		var h *s3.HeadObjectOutput
		err := c.retry(ctx, "head", func(int) error {
			var err error
			h, err = c.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key, PartNumber: aws.Int32(n), ChecksumMode: types.ChecksumModeEnabled})
			return mapErr(err)
		})
		if err != nil {
			return nil, fmt.Errorf("head part %d of s3://%s/%s: %w", n, bucket, key, err)
		}
		got := aws.ToInt32(h.PartsCount)
		switch {
		case n == 1 && got <= 1:
			return nil, nil // single-part object
		case n == 1 && got > MaxParts:
			return nil, fmt.Errorf("head part 1 of s3://%s/%s: %w: the store counts %d parts, over S3's limit of %d", bucket, key, ErrListing, got, MaxParts)
		case n == 1:
			count = got
		case got != count:
			return nil, fmt.Errorf("head part %d of s3://%s/%s: the part count changed from %d to %d while the parts were read: the object changed; read it again", n, bucket, key, count, got)
		}
		sum, err := partChecksum(h.ChecksumCRC64NVME, h.ChecksumCRC32C, h.ChecksumCRC32, h.ChecksumSHA256, h.ChecksumSHA1)
		if err != nil {
			return nil, fmt.Errorf("head part %d of s3://%s/%s: %w", n, bucket, key, err)
		}
		parts = append(parts, Part{Number: int(n), Size: aws.ToInt64(h.ContentLength), Checksum: sum})
		if n >= count {
			return parts, nil
		}
	}
}

// nextPart checks that part n may follow parts: numbered upwards, and at most MaxParts of them.
func nextPart(parts []Part, n int) error {
	if len(parts) >= MaxParts {
		return fmt.Errorf("%w: the store lists more than %d parts, S3's limit", ErrListing, MaxParts)
	}
	if n < 1 || n > MaxParts || (len(parts) > 0 && n <= parts[len(parts)-1].Number) {
		return fmt.Errorf("%w: part number %d out of order or outside 1..%d", ErrListing, n, MaxParts)
	}
	return nil
}

// maxChecksumLen bounds a part's checksum text: S3's longest, SHA-256 in base64, is 44 bytes.
const maxChecksumLen = 64

// partChecksum is the one checksum a part carries (S3 gives one algorithm per object).
func partChecksum(sums ...*string) (string, error) {
	var v string
	for _, s := range sums {
		v += aws.ToString(s)
	}
	if len(v) > maxChecksumLen {
		return "", fmt.Errorf("%w: a part checksum of %d bytes, longer than any S3 checksum", ErrListing, len(v))
	}
	return v, nil
}

func trimETag(s string) string { return strings.Trim(s, `"`) }

// mapErr turns 404s, refused preconditions and certificates that do not verify into the sentinels
// callers branch on, and bounds the text of every error: a server's message is quoted in it.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	return bounded.Err(sentinel(err), errTextMax)
}

func sentinel(err error) error {
	if t := tlsProblem(err); t != nil {
		return t
	}
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var nb *types.NoSuchBucket
	if errors.As(err, &nsk) || errors.As(err, &nf) || errors.As(err, &nb) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		case http.StatusPreconditionFailed:
			return fmt.Errorf("%w: %w", ErrExists, err)
		}
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed" {
		return fmt.Errorf("%w: %w", ErrExists, err)
	}
	return err
}

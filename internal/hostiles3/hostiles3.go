// Package hostiles3 is an S3 server for security tests that serves exactly the keys and bytes it is
// given, including keys a real server refuses to store ("../x", "/abs", "a//b", "a/./b", a key and
// a "directory" of the same name, the same key twice, 300-byte components, control characters).
// warmd must treat every listed name as hostile, so the tests need a bucket an attacker controls
// completely; versitygw (the real server the other tests use) rejects most of these names itself.
//
// It speaks the part of the S3 REST API warmd's client (aws-sdk-go-v2, path-style) uses: ListObjectsV2
// with continuation tokens and max-keys, HEAD and ranged GET of an object with its ETag and a
// full-object checksum header (CRC32, CRC32C, CRC64NVME, SHA1, SHA256), and HEAD bucket. Requests are
// not authenticated. Everything else answers 501 NotImplemented, which the client reports as an
// error. It owns no storage: objects live in memory, in the order given.
//
// Keys travel in XML listings, and XML 1.0 cannot carry NUL or most C0 control characters: the SDK's
// decoder refuses such a listing. Keys with those bytes are therefore tested at the source level
// (objstore.Memory); the stub writes them as numeric character references, which the client then
// refuses to decode, as it would from a real hostile server.
package hostiles3

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"warmd.io/warmd/pkg/objstore"
)

// Object is one object the stub serves.
type Object struct {
	Key  string
	Data []byte
	// ETag is sent quoted; empty: the MD5 of Data (a single-part upload's ETag). "-" sends none.
	ETag string
	// ChecksumAlgorithm, when set (CRC32, CRC32C, CRC64NVME, SHA1, SHA256), makes HEAD and GET send the
	// full-object checksum of Data under x-amz-checksum-<alg>.
	ChecksumAlgorithm string
	// Checksum overrides the computed value (base64), e.g. to send a wrong one.
	Checksum string
	// Size overrides len(Data) in listings and HEAD (a lying server); 0 keeps len(Data).
	Size int64
}

// Server is a running stub. Bucket is the only bucket it has.
type Server struct {
	*httptest.Server
	Bucket string
	// PageSize is the most keys one ListObjectsV2 page returns (the client's max-keys may lower it).
	PageSize int

	mu       sync.Mutex
	objects  []Object
	requests []Request
}

// Request is one request the stub answered, for tests that assert a key was never fetched.
type Request struct {
	Method string
	Key    string // decoded; "" for bucket-level requests
	Range  string
}

// New starts a stub serving objs in bucket on 127.0.0.1; it stops when the test ends.
func New(t testing.TB, bucket string, objs ...Object) *Server {
	t.Helper()
	s := &Server{Bucket: bucket, PageSize: 1000, objects: append([]Object(nil), objs...)}
	// A bare handler, not a ServeMux: ServeMux cleans "/b/../x" and redirects, and the point is to
	// serve the names as sent.
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Endpoint is the base URL to give the S3 client (path-style).
func (s *Server) Endpoint() string { return s.URL }

// Put adds (or, with the same key, adds another: listings then carry the key twice) an object.
func (s *Server) Put(o Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects = append(s.objects, o)
}

// Requests returns every request answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Fetched reports whether any GET asked for key's bytes.
func (s *Server) Fetched(key string) bool {
	for _, r := range s.Requests() {
		if r.Method == http.MethodGet && r.Key == key {
			return true
		}
	}
	return false
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// The key is everything after "/<bucket>/" in the path as sent, unescaped once (the SDK escapes
	// every byte outside the unreserved set, and leaves "/" and "." as they are).
	raw := r.URL.EscapedPath()
	rest, ok := strings.CutPrefix(raw, "/"+s.Bucket)
	if !ok || (rest != "" && rest[0] != '/') {
		s.fail(w, http.StatusNotFound, "NoSuchBucket", "no bucket at "+raw)
		return
	}
	key := ""
	if rest != "" {
		var err error
		if key, err = url.PathUnescape(rest[1:]); err != nil {
			s.fail(w, http.StatusBadRequest, "InvalidURI", err.Error())
			return
		}
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Key: key, Range: r.Header.Get("Range")})
	s.mu.Unlock()
	q := r.URL.Query()
	q.Del("x-id") // the SDK names the operation in the query
	switch {
	case key == "" && r.Method == http.MethodGet && q.Get("list-type") == "2":
		s.list(w, q)
	case key == "" && r.Method == http.MethodHead:
		w.WriteHeader(http.StatusOK)
	case key != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) && len(q) == 0:
		s.object(w, r, key)
	default:
		s.fail(w, http.StatusNotImplemented, "NotImplemented", "hostiles3 does not implement "+r.Method+" "+r.URL.RequestURI())
	}
}

func (s *Server) find(key string) (Object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.objects {
		if o.Key == key {
			return o, true
		}
	}
	return Object{}, false
}

type listResult struct {
	XMLName               xml.Name  `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name                  string    `xml:"Name"`
	Prefix                string    `xml:"Prefix"`
	KeyCount              int       `xml:"KeyCount"`
	MaxKeys               int       `xml:"MaxKeys"`
	IsTruncated           bool      `xml:"IsTruncated"`
	ContinuationToken     string    `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string    `xml:"NextContinuationToken,omitempty"`
	Contents              []content `xml:"Contents"`
}

type content struct {
	Key               rawXML `xml:"Key"`
	LastModified      string `xml:"LastModified"`
	ETag              string `xml:"ETag,omitempty"`
	Size              int64  `xml:"Size"`
	StorageClass      string `xml:"StorageClass"`
	ChecksumAlgorithm string `xml:"ChecksumAlgorithm,omitempty"`
	ChecksumType      string `xml:"ChecksumType,omitempty"`
}

// list answers ListObjectsV2 in the objects' order (not sorted: a hostile server need not sort),
// PageSize keys per page; the continuation token is the index of the next key.
func (s *Server) list(w http.ResponseWriter, q url.Values) {
	prefix := q.Get("prefix")
	s.mu.Lock()
	var match []Object
	for _, o := range s.objects {
		if strings.HasPrefix(o.Key, prefix) {
			match = append(match, o)
		}
	}
	page := s.PageSize
	s.mu.Unlock()
	if mk, err := strconv.Atoi(q.Get("max-keys")); err == nil && mk > 0 && mk < page {
		page = mk
	}
	start := 0
	if tok := q.Get("continuation-token"); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n > len(match) {
			s.fail(w, http.StatusBadRequest, "InvalidArgument", "bad continuation token")
			return
		}
		start = n
	}
	end := min(start+page, len(match))
	res := listResult{Name: s.Bucket, Prefix: prefix, MaxKeys: page, ContinuationToken: q.Get("continuation-token")}
	for _, o := range match[start:end] {
		c := content{Key: rawXML{escapeKey(o.Key)}, LastModified: time.Unix(1700000000, 0).UTC().Format(time.RFC3339), ETag: etag(o),
			Size: size(o), StorageClass: "STANDARD"}
		if o.ChecksumAlgorithm != "" {
			c.ChecksumAlgorithm, c.ChecksumType = o.ChecksumAlgorithm, "FULL_OBJECT"
		}
		res.Contents = append(res.Contents, c)
	}
	res.KeyCount = len(res.Contents)
	if end < len(match) {
		res.IsTruncated, res.NextContinuationToken = true, strconv.Itoa(end)
	}
	out, err := xml.Marshal(res)
	if err != nil {
		s.fail(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Write([]byte(xml.Header))
	w.Write(out)
}

func (s *Server) object(w http.ResponseWriter, r *http.Request, key string) {
	o, ok := s.find(key)
	if !ok {
		s.fail(w, http.StatusNotFound, "NoSuchKey", "no such key")
		return
	}
	h := w.Header()
	if e := etag(o); e != "" {
		h.Set("ETag", e)
	}
	h.Set("Last-Modified", time.Unix(1700000000, 0).UTC().Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	if o.ChecksumAlgorithm != "" {
		v := o.Checksum
		if v == "" {
			hh, err := objstore.NewHash(o.ChecksumAlgorithm)
			if err != nil {
				s.fail(w, http.StatusInternalServerError, "InternalError", err.Error())
				return
			}
			hh.Write(o.Data)
			v = objstore.Encode(hh.Sum(nil))
		}
		h.Set("x-amz-checksum-"+strings.ToLower(o.ChecksumAlgorithm), v)
		h.Set("x-amz-checksum-type", "FULL_OBJECT")
	}
	data, status := o.Data, http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" {
		off, end, ok := parseRange(rg, int64(len(o.Data)))
		if !ok {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", len(o.Data)))
			s.fail(w, http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "range "+rg)
			return
		}
		data, status = o.Data[off:end+1], http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, end, len(o.Data)))
	}
	if r.Method == http.MethodHead {
		h.Set("Content-Length", strconv.FormatInt(size(o), 10))
		w.WriteHeader(http.StatusOK)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	w.Write(data)
}

// parseRange reads "bytes=a-b" (one range; b may be omitted) against an object of n bytes.
func parseRange(v string, n int64) (off, end int64, ok bool) {
	spec, found := strings.CutPrefix(v, "bytes=")
	a, b, dash := strings.Cut(spec, "-")
	if !found || !dash {
		return 0, 0, false
	}
	off, err := strconv.ParseInt(a, 10, 64)
	if err != nil || off < 0 || off >= n {
		return 0, 0, false
	}
	end = n - 1
	if b != "" {
		if end, err = strconv.ParseInt(b, 10, 64); err != nil || end < off {
			return 0, 0, false
		}
		end = min(end, n-1)
	}
	return off, end, true
}

// rawXML is element text written as is (escapeKey made it).
type rawXML struct {
	V string `xml:",innerxml"`
}

// escapeKey escapes a key for element text. Runes XML 1.0 cannot carry become numeric character
// references and invalid UTF-8 bytes are written raw, so the client's decoder refuses the listing
// (encoding/xml would instead replace them with U+FFFD and serve a different key).
func escapeKey(k string) string {
	var b strings.Builder
	for i := 0; i < len(k); {
		r, n := utf8.DecodeRuneInString(k[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteByte(k[i])
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '&':
			b.WriteString("&amp;")
		case r == '\r':
			b.WriteString("&#13;") // raw, the decoder would turn it into a newline
		case r < 0x20 && r != '\t' && r != '\n':
			fmt.Fprintf(&b, "&#x%X;", r)
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

func etag(o Object) string {
	switch o.ETag {
	case "-":
		return ""
	case "":
		sum := md5.Sum(o.Data)
		return `"` + hex.EncodeToString(sum[:]) + `"`
	}
	return `"` + o.ETag + `"`
}

func size(o Object) int64 {
	if o.Size != 0 {
		return o.Size
	}
	return int64(len(o.Data))
}

type errorBody struct {
	XMLName xml.Name `xml:"Error"`
	Code    string   `xml:"Code"`
	Message string   `xml:"Message"`
}

func (s *Server) fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	out, _ := xml.Marshal(errorBody{Code: code, Message: msg})
	w.Write(out)
}

package testenv_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/kubeenv"
)

// TestSmokeContainerd pulls an image from an in-process registry into each real containerd, with
// unpack, through the same v2 client library warmd uses.
func TestSmokeContainerd(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	img, err := random.Image(1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(reg.URL, "http://") + "/smoke/img:v1"
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatalf("push to in-process registry: %v", err)
	}
	want, _ := img.Digest()

	for _, tc := range []struct{ name, socket, version string }{
		{"containerd-2.4", testenv.Containerd(t), "2.4.2"},
		{"containerd-1.6", testenv.Containerd16(t), "1.6.20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), "warmd-smoke"), time.Minute)
			defer cancel()
			c, err := containerd.New(tc.socket)
			if err != nil {
				t.Fatalf("connect %s: %v", tc.socket, err)
			}
			defer c.Close()
			v, err := c.Version(ctx)
			if err != nil {
				t.Fatalf("version: %v", err)
			}
			if !strings.HasPrefix(v.Version, tc.version) {
				t.Fatalf("daemon at %s is %s, want %s", tc.socket, v.Version, tc.version)
			}
			t.Logf("containerd %s at %s", v.Version, tc.socket)
			pulled, err := c.Pull(ctx, ref, containerd.WithPullUnpack)
			if err != nil {
				t.Fatalf("pull %s: %v", ref, err)
			}
			defer func() { _ = c.ImageService().Delete(ctx, ref) }()
			if got := pulled.Target().Digest.String(); got != want.String() {
				t.Errorf("pulled digest %s, pushed %s", got, want)
			}
			ok, err := pulled.IsUnpacked(ctx, "overlayfs")
			if err != nil || !ok {
				t.Errorf("image not unpacked into overlayfs: %v %v", ok, err)
			}
		})
	}
}

// TestSmokeS3 puts and gets an object in the real versitygw with aws-sdk-go-v2.
func TestSmokeS3(t *testing.T) {
	env := testenv.RequireS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s3.New(s3.Options{
		BaseEndpoint:               aws.String(env.Endpoint),
		Region:                     "us-east-1",
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(env.AccessKey, env.SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	bucket := fmt.Sprintf("smoke-%d", time.Now().UnixNano())
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	body := []byte("warmd smoke object")
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("a/b.txt"), Body: bytes.NewReader(body)}); err != nil {
		t.Fatalf("put: %v", err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("a/b.txt"), Range: aws.String("bytes=6-10")})
	if err != nil {
		t.Fatalf("ranged get: %v", err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != "smoke" {
		t.Errorf("ranged get returned %q, want %q", got, "smoke")
	}
	_, _ = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("a/b.txt")})
	_, _ = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket})
}

// TestSmokeAPIServer creates a Node in the real kube-apiserver and patches a label with a strategic
// merge patch, as the API server decides it.
func TestSmokeAPIServer(t *testing.T) {
	env := kubeenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := env.Clientset.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	t.Logf("kube-apiserver %s", v.GitVersion)
	if v.GitVersion != "v1.37.2" {
		t.Errorf("kube-apiserver is %s, want v1.37.2", v.GitVersion)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "smoke-a", Labels: map[string]string{"other.io/keep": "yes"}}}
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node: %v", err)
	}
	patch := []byte(`{"metadata":{"labels":{"warmd.io/warm":"false"}}}`)
	got, err := env.Client.CoreV1().Nodes().Patch(ctx, "smoke-a", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch node: %v", err)
	}
	if got.Labels["warmd.io/warm"] != "false" || got.Labels["other.io/keep"] != "yes" {
		t.Errorf("labels after patch = %v, want both warmd.io/warm=false and other.io/keep=yes", got.Labels)
	}
}

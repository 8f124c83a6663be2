package objstore

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
)

// crc64NVME is the reflected NVMe polynomial S3's CRC64NVME uses (as crc64.MakeTable wants it).
const crc64NVME = 0x9a6c9329ac4bc9b5

var (
	crc32cTable    = crc32.MakeTable(crc32.Castagnoli)
	crc64NVMETable = crc64.MakeTable(crc64NVME)
)

// NewHash returns a hash computing S3 checksum algorithm alg, so callers verify what Head reports.
func NewHash(alg string) (hash.Hash, error) {
	switch alg {
	case "CRC32":
		return crc32.NewIEEE(), nil
	case "CRC32C":
		return crc32.New(crc32cTable), nil
	case "CRC64NVME":
		return crc64.New(crc64NVMETable), nil
	case "SHA1":
		return sha1.New(), nil
	case "SHA256":
		return sha256.New(), nil
	}
	return nil, fmt.Errorf("checksum algorithm %q is not supported (want CRC32, CRC32C, CRC64NVME, SHA1 or SHA256)", alg)
}

// Encode renders a digest the way S3 reports checksums (base64).
func Encode(sum []byte) string { return base64.StdEncoding.EncodeToString(sum) }

// CompositeChecksum computes an S3 composite (multipart) checksum from the raw digests of each part:
// the checksum of their concatenation, base64, with "-<parts>" appended.
func CompositeChecksum(alg string, partSums [][]byte) (string, error) {
	h, err := NewHash(alg)
	if err != nil {
		return "", err
	}
	for _, s := range partSums {
		h.Write(s)
	}
	return fmt.Sprintf("%s-%d", Encode(h.Sum(nil)), len(partSums)), nil
}

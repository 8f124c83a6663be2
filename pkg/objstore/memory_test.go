package objstore_test

import (
	"testing"

	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/objstore/objstoretest"
)

func TestMemoryConformance(t *testing.T) {
	objstoretest.Run(t, objstore.NewMemory(), "weights-fake")
}

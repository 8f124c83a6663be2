package main

import "warmd.io/warmd/pkg/daemon"

// parts lists, in start order, the capabilities `warmd run` runs.
func parts() []daemon.PartFactory {
	return []daemon.PartFactory{
		newGPUPart,
		newImagesPart,
		newWeightsPart,
		newCachePart,
	}
}

package readiness

// Names readiness owns on its Node. Everything warmd writes is under labels.Prefix or
// model.LabelPrefix (labels.OwnKey); the GPU identity keys are pkg/nvml's, the per-model keys
// pkg/model's (model.LabelKey).
const (
	LabelWarm = "warmd.io/warm"
	// AnnotationStatus holds the compact JSON summary (see StatusSummary).
	AnnotationStatus = "warmd.io/status"
	// TaintCold is the optional startup taint, removed once the node is warm.
	TaintCold = "warmd.io/cold"
	// ConditionType is the Node condition warmd owns.
	ConditionType = "WarmdReady"
	// FieldManager is the server-side-apply field manager of every warmd write.
	FieldManager = "warmd"
)

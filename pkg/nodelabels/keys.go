package nodelabels

// The Node wire contract's keys: every label, annotation, taint and condition that warmd's node
// daemon writes and that the scheduler extender, `warmd status --cluster`, the chart's scheduler
// profiles and users' selectors read. They live here, in a package that imports nothing of the
// daemon, so a reader links the words and not the writer (hack/layering checks pkg/extender links no
// daemon part). The per-model keys are model.LabelKey's (models.warmd.io/<model>).

// GPU identity label keys, under warmd's own prefix so warmd never fights GPU Feature Discovery over
// nvidia.com/* keys (pkg/nvml computes their values).
const (
	LabelPresent      = "warmd.io/gpu.present"
	LabelSKU          = "warmd.io/gpu.sku"
	LabelProduct      = "warmd.io/gpu.product"
	LabelCount        = "warmd.io/gpu.count"
	LabelMemory       = "warmd.io/gpu.memory"
	LabelFamily       = "warmd.io/gpu.family"
	LabelComputeMajor = "warmd.io/gpu.compute.major"
	LabelComputeMinor = "warmd.io/gpu.compute.minor"
	LabelDriverMajor  = "warmd.io/gpu.driver.major"
	LabelDriverMinor  = "warmd.io/gpu.driver.minor"
	LabelDriverRev    = "warmd.io/gpu.driver.rev"
	LabelCUDAMajor    = "warmd.io/gpu.cuda.major"
	LabelCUDAMinor    = "warmd.io/gpu.cuda.minor"
	LabelMIG          = "warmd.io/gpu.mig"
	LabelClique       = "warmd.io/gpu.clique"
)

// Node-level keys pkg/readiness writes.
const (
	// LabelWarm is "true" when every model this Node wants is warm.
	LabelWarm = "warmd.io/warm"
	// AnnotationStatus holds the compact JSON summary (readiness.StatusSummary).
	AnnotationStatus = "warmd.io/status"
	// AnnotationPredicted carries the predicted seconds to ready per model (pkg/predict).
	AnnotationPredicted = "warmd.io/predicted-ready"
	// TaintCold is the optional startup taint, removed once the node is warm.
	TaintCold = "warmd.io/cold"
	// ConditionType is the Node condition warmd owns.
	ConditionType = "WarmdReady"
)

// State is how warm one model is on a Node: the value of its models.warmd.io/<model> label, so the
// values are short, lower case and stable.
type State string

// The states, from cold to warm. Image and Weights are partial: Weights means the weights (the slow
// part) are verified but something else is missing; Image means only the image is ready.
const (
	StateCold    State = "cold"
	StateImage   State = "image"
	StateWeights State = "weights"
	StateWarm    State = "warm"
	StateFailed  State = "failed"
)

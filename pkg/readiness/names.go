package readiness

// FieldManager is the server-side-apply field manager of every warmd write. The keys readiness
// writes on its Node (the warm label, the status annotation, the startup taint, the condition) are
// the wire contract's, in pkg/nodelabels; the per-model keys are pkg/model's (model.LabelKey).
const FieldManager = "warmd"

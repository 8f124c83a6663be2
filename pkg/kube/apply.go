package kube

import (
	corev1 "k8s.io/api/core/v1"
)

// NodeApply is a server-side apply configuration of a Node holding only what warmd owns: its labels
// and annotations (Apply), or its conditions (ApplyStatus). Fields left empty are left out of the
// request, so applying a NodeApply without a label gives up warmd's ownership of every label it
// held, as client-go's apply configurations do. It marshals to the JSON apply body the API server
// takes (kind and apiVersion set by NewNodeApply).
type NodeApply struct {
	Kind       string           `json:"kind"`
	APIVersion string           `json:"apiVersion"`
	Metadata   NodeApplyMeta    `json:"metadata"`
	Status     *NodeApplyStatus `json:"status,omitempty"`
}

// NodeApplyMeta is the metadata a NodeApply sets.
type NodeApplyMeta struct {
	Name        *string           `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// NodeApplyStatus is the status a NodeApply sets: conditions, merged by type.
type NodeApplyStatus struct {
	Conditions []corev1.NodeCondition `json:"conditions,omitempty"`
}

// NewNodeApply starts the apply configuration of Node name.
func NewNodeApply(name string) *NodeApply {
	return &NodeApply{Kind: "Node", APIVersion: "v1", Metadata: NodeApplyMeta{Name: &name}}
}

// GetName is the Node's name, which the apply request is sent to.
func (a *NodeApply) GetName() *string { return a.Metadata.Name }

// WithLabels sets the labels to apply (none: ownership of every label given up).
func (a *NodeApply) WithLabels(l map[string]string) *NodeApply {
	a.Metadata.Labels = l
	return a
}

// WithAnnotations sets the annotations to apply.
func (a *NodeApply) WithAnnotations(m map[string]string) *NodeApply {
	a.Metadata.Annotations = m
	return a
}

// WithConditions sets the status conditions to apply (ApplyStatus).
func (a *NodeApply) WithConditions(c ...corev1.NodeCondition) *NodeApply {
	a.Status = &NodeApplyStatus{Conditions: c}
	return a
}

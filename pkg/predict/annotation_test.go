package predict

import (
	"math"
	"strings"
	"testing"

	"warmd.io/warmd/pkg/phases"
)

func TestAnnotation(t *testing.T) {
	tests := []struct {
		name    string
		preds   []Prediction
		cap     int
		want    string
		wantErr string
	}{
		{name: "empty", want: "{}"},
		{name: "rounded up, keys sorted", preds: []Prediction{{Model: "b/m", Seconds: 70.2}, {Model: "a/m", Seconds: 431}}, want: `{"a/m":431,"b/m":71}`},
		{name: "cap drops the slowest first", preds: []Prediction{{Model: "a/m", Seconds: 431}, {Model: "b/m", Seconds: 70}, {Model: "c/m", Seconds: 140}}, cap: 19, want: `{"b/m":70}`},
		{name: "NaN refused", preds: []Prediction{{Model: "a/m", Seconds: math.NaN()}}, wantErr: "invalid seconds"},
		{name: "unnamed refused", preds: []Prediction{{Seconds: 3}}, wantErr: "invalid seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Annotation(tt.preds, tt.cap)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Annotation = %q, %v; want %q", got, err, tt.want)
			}
			back, err := ParseAnnotation(got)
			if err != nil || len(back) != len(tt.preds) && tt.cap == 0 {
				t.Errorf("round trip = %v, %v", back, err)
			}
		})
	}
}

func TestParseAnnotation(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]float64
		wantErr bool
	}{
		{name: "empty is none", in: ""},
		{name: "valid", in: `{"a/m":70}`, want: map[string]float64{"a/m": 70}},
		{name: "not an object", in: `[1]`, wantErr: true},
		{name: "negative", in: `{"a/m":-1}`, wantErr: true},
		{name: "string value", in: `{"a/m":"70"}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAnnotation(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) || got["a/m"] != tt.want["a/m"] {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPredictAll(t *testing.T) {
	p := &Predictor{}
	st, ann, err := p.PredictAll([]Situation{
		{Model: "z/m", Node: "n1", SKU: h100, ImageLocal: true, WeightsLocal: true, Cache: phases.CacheHit},
		{Model: "a/m", Node: "n1", SKU: h100, ImageLocal: true, WeightsLocal: true, Cache: phases.CacheMiss},
	}, Throughput{ImageBytesPerSecond: 1e8})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Predictions) != 2 || st.Predictions[0].Model != "a/m" || st.Throughput.ImageBytesPerSecond != 1e8 {
		t.Errorf("status = %+v", st)
	}
	m, err := ParseAnnotation(ann)
	if err != nil || m["a/m"] != math.Ceil(st.Predictions[0].Seconds) || m["z/m"] != math.Ceil(st.Predictions[1].Seconds) {
		t.Errorf("annotation %s (%v) does not match %+v", ann, err, st.Predictions)
	}
}

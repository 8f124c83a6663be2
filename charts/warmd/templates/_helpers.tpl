{{/* Labels every object carries: the name the manifests use, plus Helm's bookkeeping. */}}
{{- define "warmd.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ include "warmd.tag" .root | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The image tag: values, else the chart's appVersion. */}}
{{- define "warmd.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end }}

{{/* The image reference: repository@digest when a digest is set, else repository:tag. */}}
{{- define "warmd.image" -}}
{{- if .Values.image.digest -}}
{{- if not (hasPrefix "sha256:" .Values.image.digest) -}}
{{- fail (printf "image.digest %q must start with sha256: (the digest `make image` prints)" .Values.image.digest) -}}
{{- end -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ include "warmd.tag" . }}
{{- end -}}
{{- end }}

{{/* The ServiceAccount user name the admission policy matches. */}}
{{- define "warmd.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:warmd
{{- end }}

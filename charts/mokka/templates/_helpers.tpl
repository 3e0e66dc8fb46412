{{/*
Names and labels.
*/}}
{{- define "mokka.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mokka.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mokka.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mokka.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mokka.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "mokka.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mokka
{{- end }}

{{/*
The built-in profiles: the files under profiles/, copied from mokka-core by tools/chart_profiles.py.
*/}}
{{- define "mokka.builtinProfiles" -}}
{{- $names := list }}
{{- range $path, $_ := .Files.Glob "profiles/*.yaml" }}
{{- $names = append $names ($path | base | trimSuffix ".yaml") }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{- define "mokka.surfaceNames" -}}
["gpu","pci","cdi","imex","nvlink","fabricmanager","ib"]
{{- end }}

{{/*
Checks the schema also makes, repeated here so that a render with --skip-schema-validation (or a
values.schema.json edited by hand) still fails with a message that lists what is valid.
*/}}
{{- define "mokka.validate" -}}
{{- $profiles := include "mokka.builtinProfiles" . | fromJsonArray }}
{{- $surfaces := include "mokka.surfaceNames" . | fromJsonArray }}
{{- if not (has .Values.gpu.profile $profiles) }}
{{- fail (printf "gpu.profile: unknown profile %q; available profiles: %s (or set gpu.customProfile)" (toString .Values.gpu.profile) (join ", " $profiles)) }}
{{- end }}
{{- $count := .Values.gpu.count }}
{{- if not (kindIs "invalid" $count) }}
{{- if or (not (or (kindIs "int" $count) (kindIs "int64" $count) (kindIs "float64" $count))) (lt (float64 $count) 1.0) (gt (float64 $count) 255.0) (ne (float64 $count) (float64 (int64 $count))) }}
{{- fail (printf "gpu.count: must be a whole number from 1 to 255 (or null for the profile's count), got %v" $count) }}
{{- end }}
{{- end }}
{{- range $name, $settings := .Values.surfaces }}
{{- if not (has $name $surfaces) }}
{{- fail (printf "surfaces.%s: unknown surface %q; surfaces: %s" $name $name (join ", " $surfaces)) }}
{{- end }}
{{- if not (has (toString $settings.state) (list "healthy" "failed")) }}
{{- fail (printf "surfaces.%s.state: must be healthy or failed, got %q" $name (toString $settings.state)) }}
{{- end }}
{{- end }}
{{- include "mokka.validateClusterComponents" . }}
{{- if not (kindIs "bool" .Values.kernelLog.host) }}
{{- fail (printf "kernelLog.host: must be true or false, got %q" (toString .Values.kernelLog.host)) }}
{{- end }}
{{- with .Values.integrations.fakeGpuOperator.profileLabels }}
{{- $contract := index . "fake-gpu-operator/gpu-profile" }}
{{- if and (not (kindIs "invalid" $contract)) (ne (toString $contract) "true") }}
{{- fail (printf "integrations.fakeGpuOperator.profileLabels: fake-gpu-operator/gpu-profile is a contract label and stays \"true\" (FGO only reads ConfigMaps that carry it), got %q" (toString $contract)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The profile the nodes run: gpu.customProfile (text kept verbatim, a map rendered as YAML) or the
built-in file, comments included.
*/}}
{{- define "mokka.profileText" -}}
{{- $custom := .Values.gpu.customProfile }}
{{- if and (kindIs "string" $custom) (ne $custom "") }}
{{- $custom }}
{{- else if and (kindIs "map" $custom) (gt (len $custom) 0) }}
{{- toYaml $custom }}
{{- else }}
{{- .Files.Get (printf "profiles/%s.yaml" .Values.gpu.profile) }}
{{- end }}
{{- end }}

{{- define "mokka.profileSource" -}}
{{- $custom := .Values.gpu.customProfile }}
{{- if or (and (kindIs "string" $custom) (ne $custom "")) (and (kindIs "map" $custom) (gt (len $custom) 0)) }}custom{{ else }}{{ .Values.gpu.profile }}{{ end }}
{{- end }}

{{- define "mokka.topologyEnabled" -}}
{{- if gt (len .Values.topology.domains) 0 }}true{{ end }}
{{- end }}

{{- define "mokka.topologyText" -}}
version: 1
domains:
{{- toYaml .Values.topology.domains | nindent 2 }}
{{- end }}

{{/*
Image settings of a component (list $ "node" | "allocationWatcher" | "nri"): its own, or the node image's
when its repository is "" (the node image carries every program).
*/}}
{{- define "mokka.imageSettings" -}}
{{- $root := index . 0 }}
{{- $image := index $root.Values.images (index . 1) }}
{{- if not $image.repository }}
{{- $image = $root.Values.images.node }}
{{- end }}
{{- toJson $image }}
{{- end }}

{{- define "mokka.componentImage" -}}
{{- $root := index . 0 }}
{{- $image := include "mokka.imageSettings" . | fromJson }}
{{- $tag := default $root.Chart.AppVersion $image.tag }}
{{- if $image.registry }}
{{- printf "%s/%s:%s" $image.registry $image.repository $tag }}
{{- else }}
{{- printf "%s:%s" $image.repository $tag }}
{{- end }}
{{- end }}

{{- define "mokka.componentPullPolicy" -}}
{{- (include "mokka.imageSettings" . | fromJson).pullPolicy }}
{{- end }}

{{- define "mokka.image" -}}
{{- include "mokka.componentImage" (list . "node") }}
{{- end }}

{{/*
The NRI plugin's comma-separated namespace lists (the names themselves are checked in mokka.validate).
*/}}
{{- define "mokka.nriExcludedNamespaces" -}}
{{- $excluded := .Values.nri.excludedNamespaces | default list }}
{{- if .Values.nri.excludeReleaseNamespace }}
{{- $excluded = prepend $excluded .Release.Namespace }}
{{- end }}
{{- join "," ($excluded | uniq) }}
{{- end }}

{{/*
The node's surfaces file (`mokka node up --surfaces-file`): only what differs from the defaults, so a
surface left `enabled: true` is staged when the node type has it. The node re-renders a change in place.
*/}}
{{- define "mokka.surfacesText" -}}
{{- $changed := dict }}
{{- range $name := include "mokka.surfaceNames" . | fromJsonArray }}
{{- $settings := index $.Values.surfaces $name | default dict }}
{{- $patch := dict }}
{{- if eq (toString $settings.enabled) "false" }}
{{- $_ := set $patch "enabled" false }}
{{- end }}
{{- if eq (toString $settings.state) "failed" }}
{{- $_ := set $patch "state" "failed" }}
{{- end }}
{{- if $patch }}
{{- $_ := set $changed $name $patch }}
{{- end }}
{{- end -}}
version: 1
{{- if $changed }}
surfaces:
{{- toYaml $changed | nindent 2 }}
{{- else }}
surfaces: {}
{{- end }}
{{- end }}

{{/*
The cluster components' values, checked like the rest (the schema says the same).
*/}}
{{/* A number, or one as text (`--set x=0.5` hands helm a string; the CLI parses it all the same). */}}
{{- define "mokka.isNumber" -}}
{{- if or (kindIs "int" .) (kindIs "int64" .) (kindIs "float64" .) }}true
{{- else if and (kindIs "string" .) (regexMatch "^[+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$" (toString .)) }}true
{{- end }}
{{- end }}

{{- define "mokka.isWholeNumber" -}}
{{- if and (or (kindIs "int" .) (kindIs "int64" .) (kindIs "float64" .)) (eq (float64 .) (float64 (int64 .))) }}true{{ end }}
{{- end }}

{{- define "mokka.validateClusterComponents" -}}
{{- $watch := .Values.allocationWatcher }}
{{- if or (not (include "mokka.isNumber" $watch.interval)) (le (float64 $watch.interval) 0.0) }}
{{- fail (printf "allocationWatcher.interval: must be a number of seconds greater than 0, got %v" $watch.interval) }}
{{- end }}
{{- $fraction := $watch.usedFraction }}
{{- if or (not (include "mokka.isNumber" $fraction)) (le (float64 $fraction) 0.0) (gt (float64 $fraction) 1.0) }}
{{- fail (printf "allocationWatcher.usedFraction: must be a number in (0, 1] (share of each GPU's memory per container), got %v" $fraction) }}
{{- end }}
{{- $nri := .Values.nri }}
{{- $modes := list "all" "annotated" "none" }}
{{- if not (has (toString $nri.deviceMode) $modes) }}
{{- fail (printf "nri.deviceMode: unknown device mode %q; device modes: %s" (toString $nri.deviceMode) (join ", " $modes)) }}
{{- end }}
{{- $port := $nri.healthPort }}
{{- if or (not (include "mokka.isWholeNumber" $port)) (lt (float64 $port) 1.0) (gt (float64 $port) 65535.0) }}
{{- fail (printf "nri.healthPort: must be a port number from 1 to 65535, got %v" $port) }}
{{- end }}
{{- $index := $nri.pluginIndex }}
{{- if or (not (include "mokka.isWholeNumber" $index)) (lt (float64 $index) 0.0) (gt (float64 $index) 99.0) }}
{{- fail (printf "nri.pluginIndex: must be a whole number from 0 to 99 (NRI's two-digit plugin index), got %v" $index) }}
{{- end }}
{{- range $key := list "namespaces" "excludedNamespaces" }}
{{- range $name := index $nri $key | default list }}
{{- if not (regexMatch "^([*]|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$" (toString $name)) }}
{{- fail (printf "nri.%s: %q is not a namespace name (lower-case letters, digits, '-'; or * for every namespace)" $key (toString $name)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

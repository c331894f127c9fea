{{- define "sluice.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
sluice.redisSet: "true" when the replicas share a store, by redis.url or a
store.redis section in config.
*/}}
{{- define "sluice.redisSet" -}}
{{- $store := .Values.config.store | default dict -}}
{{- if or .Values.redis.url $store.redis -}}true{{- end -}}
{{- end -}}

{{/*
sluice.config: the gateway's config file. The values the chart names
(listen, admin, upstream, concurrency, redis, the Batch API's file) make a
base, and .Values.config is merged over it. listen and admin are the
chart's: the probes, the Service and the NetworkPolicy name their ports.
*/}}
{{- define "sluice.config" -}}
{{- $v := .Values -}}
{{- $user := deepCopy ($v.config | default dict) -}}
{{- range $key := list "listen" "admin" -}}
{{- if hasKey $user $key -}}
{{- fail (printf "config.%s: the chart sets it from ports (ports.http, ports.admin); remove it from config" $key) -}}
{{- end -}}
{{- end -}}
{{- if and (hasKey $user "admin_pprof") $user.admin_pprof -}}
{{- fail "config.admin_pprof: in this chart the admin listener is on the pod's network, where the runtime's profiles would be open to whatever reaches the port; the chart does not turn them on (docs/deploy.md)" -}}
{{- end -}}
{{- $base := dict "listen" (printf ":%d" (int $v.ports.http)) "admin" (printf ":%d" (int $v.ports.admin)) "log" (dict "format" "json") -}}
{{- if not $user.upstreams -}}
{{- $up := dict "url" (required "upstream.url is required: the provider's base URL, e.g. https://api.openai.com" $v.upstream.url) -}}
{{- if $v.upstream.apiKeyEnv -}}
{{- $_ := set $up "api_key_env" $v.upstream.apiKeyEnv -}}
{{- end -}}
{{- $_ := set $base "upstream" $up -}}
{{- $_ := set $base "admission" (dict "concurrency" (int (required "concurrency is required: the provider's concurrency for your account" $v.concurrency))) -}}
{{- end -}}
{{- if $v.redis.url -}}
{{- $r := dict "url" $v.redis.url "cluster" ($v.redis.cluster | default .Release.Name) -}}
{{- if $v.redis.passwordEnv -}}
{{- $_ := set $r "password_env" $v.redis.passwordEnv -}}
{{- end -}}
{{- if gt (int $v.replicaCount) 1 -}}
{{- $_ := set $r "lease" (dict "replicas" (int $v.replicaCount)) -}}
{{- end -}}
{{- $_ := set $base "store" (dict "redis" $r) -}}
{{- else if not (include "sluice.redisSet" .) -}}
{{- $_ := set $base "batch" (dict "path" "/var/lib/sluice/batch.db") -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $base $user) -}}
{{- end -}}

{{/*
sluice.secretEnv: the environment variables the config names (the
provider's keys and Redis's password), each read from keysSecret's entry of
the same name, one per line.
*/}}
{{- define "sluice.secretEnv" -}}
{{- $cfg := include "sluice.config" . | fromYaml -}}
{{- $names := list -}}
{{- $up := $cfg.upstream | default dict -}}
{{- if $up.api_key_env -}}{{- $names = append $names $up.api_key_env -}}{{- end -}}
{{- range $u := ($cfg.upstreams | default list) -}}
{{- if $u.api_key_env -}}{{- $names = append $names $u.api_key_env -}}{{- end -}}
{{- end -}}
{{- $store := $cfg.store | default dict -}}
{{- $redis := $store.redis | default dict -}}
{{- if $redis.password_env -}}{{- $names = append $names $redis.password_env -}}{{- end -}}
{{- range $n := ($names | uniq) }}
{{ $n }}
{{- end -}}
{{- end -}}

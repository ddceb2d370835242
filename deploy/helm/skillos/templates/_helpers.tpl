{{/* Names, labels and the small computed values shared by every template. */}}

{{- define "skillos.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "skillos.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "skillos.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "skillos.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "skillos.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "skillos.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: skillos
{{- end -}}

{{/* selector labels of one component: (dict "root" $ "component" "executor") */}}
{{- define "skillos.selectorLabels" -}}
app.kubernetes.io/name: {{ include "skillos.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "skillos.componentLabels" -}}
{{ include "skillos.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* image of one Dockerfile target: (dict "root" $ "target" "envs") */}}
{{- define "skillos.image" -}}
{{- printf "%s-%s:%s" .root.Values.image.repository .target (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}

{{- define "skillos.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "skillos.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "skillos.secretName" -}}
{{- default (printf "%s-secrets" (include "skillos.fullname" .)) .Values.existingSecret -}}
{{- end -}}

{{/* in-cluster URL of a SkillOS service: (dict "root" $ "name" "skillrepo") */}}
{{- define "skillos.serviceUrl" -}}
{{- $svc := index .root.Values.services .name -}}
{{- printf "http://%s-%s:%v" (include "skillos.fullname" .root) .name $svc.port -}}
{{- end -}}

{{/* OpenAI-compatible base URL of one LLM role: (dict "root" $ "role" "curator") */}}
{{- define "skillos.llmBaseUrl" -}}
{{- $llm := .root.Values.llm -}}
{{- if eq $llm.mode "embedded" -}}
{{- printf "http://%s-llm:%v/v1" (include "skillos.fullname" .root) $llm.embedded.port -}}
{{- else if eq $llm.mode "vllm" -}}
{{- $role := ternary $llm.vllm.judgeRole .role (eq .role "judge") -}}
{{- printf "http://%s-vllm-%s:%v/v1" (include "skillos.fullname" .root) $role $llm.vllm.port -}}
{{- else if eq $llm.mode "external" -}}
{{- required (printf "llm.external.%s.baseUrl is required when llm.mode=external" .role) (index $llm.external .role).baseUrl -}}
{{- else -}}
{{- fail (printf "llm.mode must be embedded, vllm or external, not %q" $llm.mode) -}}
{{- end -}}
{{- end -}}

{{- define "skillos.llmModel" -}}
{{- $llm := .root.Values.llm -}}
{{- if eq $llm.mode "embedded" -}}
{{- $llm.embedded.model -}}
{{- else if eq $llm.mode "vllm" -}}
{{- $role := ternary $llm.vllm.judgeRole .role (eq .role "judge") -}}
{{- (index $llm.vllm.roles $role).servedModelName -}}
{{- else -}}
{{- required (printf "llm.external.%s.model is required when llm.mode=external" .role) (index $llm.external .role).model -}}
{{- end -}}
{{- end -}}

{{/* pod-level settings shared by SkillOS pods: env from the ConfigMap and the Secret */}}
{{- define "skillos.envFromConfig" -}}
- configMapRef:
    name: {{ include "skillos.fullname" . }}-config
{{- end -}}

{{- define "skillos.envFrom" -}}
- configMapRef:
    name: {{ include "skillos.fullname" . }}-config
- secretRef:
    name: {{ include "skillos.secretName" . }}
{{- end -}}

{{- define "skillos.httpProbes" -}}
{{- $p := .root.Values.probes -}}
startupProbe:
  httpGet: { path: /healthz, port: http }
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
livenessProbe:
  httpGet: { path: /healthz, port: http }
  periodSeconds: {{ $p.liveness.periodSeconds }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
readinessProbe:
  httpGet: { path: /readyz, port: http }
  periodSeconds: {{ $p.readiness.periodSeconds }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
{{- end -}}

{{- define "skillos.topologySpread" -}}
{{- if .root.Values.topologySpread.enabled }}
topologySpreadConstraints:
  - maxSkew: {{ .root.Values.topologySpread.maxSkew }}
    topologyKey: {{ .root.Values.topologySpread.topologyKey }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "skillos.selectorLabels" . | nindent 8 }}
{{- end }}
{{- end -}}

{{/* the data of the Secret this release keeps (base64-decoded, as YAML), read from the cluster with
     `lookup`; empty under `helm template` and on the first install */}}
{{- define "skillos.keptSecretData" -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .secret -}}
{{- $out := dict -}}
{{- if and $existing $existing.data -}}
{{- range $k, $v := $existing.data }}{{ $_ := set $out $k (b64dec $v) }}{{ end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* one secret value: the given one, else (for generated keys only) the one kept in the release's
     Secret, else a new random one. Keys the chart computes (SKILLOS_DATABASE_URL, SKILLOS_REDIS_URL,
     SKILLOS_AUTH_TOKENS) are never read back: a computed value read back would pass for a user-given
     one on the next upgrade. (dict "value" v "kept" keptData "key" k "generate" bool) */}}
{{- define "skillos.secretValue" -}}
{{- if .value -}}
{{- .value -}}
{{- else if and .generate (hasKey .kept .key) (index .kept .key) -}}
{{- index .kept .key -}}
{{- else if .generate -}}
{{- randAlphaNum 40 -}}
{{- end -}}
{{- end -}}

{{/* API versions picked from what the cluster serves (`.Capabilities.APIVersions`, from the API server's
     discovery on install/upgrade) and its version (`--kube-version` for `helm template`): the GA
     versions where they exist, else the beta ones that Kubernetes 1.19-1.22 serve. */}}
{{- define "skillos.hpa.apiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "autoscaling/v2") (semverCompare ">=1.23-0" .Capabilities.KubeVersion.Version) -}}
autoscaling/v2
{{- else -}}
autoscaling/v2beta2
{{- end -}}
{{- end -}}

{{- define "skillos.pdb.apiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "policy/v1") (semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version) -}}
policy/v1
{{- else -}}
policy/v1beta1
{{- end -}}
{{- end -}}

{{/* storageClassName of a claim: its own setting, else global.storageClass; "-" renders "" (no
     dynamic provisioning, bind a pre-created PV); nothing at all leaves the cluster's default class.
     (dict "root" $ "class" "<the claim's own setting>") */}}
{{- define "skillos.storageClass" -}}
{{- $class := default (.root.Values.global).storageClass .class -}}
{{- if eq $class "-" -}}
storageClassName: ""
{{- else if $class -}}
storageClassName: {{ $class | quote }}
{{- end -}}
{{- end -}}

{{/* With llm.mode=vllm every role's key must be the one vLLM serves (SKILLOS_LLM_API_KEY): a per-role key set to
     anything else would be refused by vLLM on every call. (dict "data" <the Secret's data> "where" "<what it is>") */}}
{{- define "skillos.vllmRoleKeys" -}}
{{- range $role := list "EXECUTOR" "CURATOR" "JUDGE" }}
{{- $k := get $.data (printf "SKILLOS_%s_LLM_API_KEY" $role) }}
{{- if and $k (ne $k (get $.data "SKILLOS_LLM_API_KEY")) }}
{{- fail (printf "%s: SKILLOS_%s_LLM_API_KEY differs from SKILLOS_LLM_API_KEY, but with llm.mode=vllm every role calls vLLM, which serves one key (SKILLOS_LLM_API_KEY): leave the per-role key empty" $.where $role) }}
{{- end }}
{{- end }}
{{- end -}}

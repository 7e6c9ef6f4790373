{{/*
Labels on every object of the chart.
*/}}
{{- define "agent-sandbox.labels" -}}
app.kubernetes.io/name: agent-sandbox
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: agent-sandbox
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end }}

{{/*
namespace is where every namespaced object goes: namespace.name, or the
release namespace when that is empty.
*/}}
{{- define "agent-sandbox.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end }}

{{/*
serviceName is the controller's metrics Service (service.name).
*/}}
{{- define "agent-sandbox.serviceName" -}}
{{- default "agent-sandbox-controller" .Values.service.name -}}
{{- end }}

{{/*
image renders "repository:tag" of an image value; the tag defaults to the
chart's appVersion. Call with (dict "image" .Values.image "root" .).
*/}}
{{- define "agent-sandbox.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | toString | default .root.Chart.AppVersion) -}}
{{- end }}

{{/*
flagArgs renders one "--flag=value" list item per set (non-null) value.
Call with (dict "values" <map of values> "names" <map of value key to flag>).
Whole numbers are printed without exponent or fraction, since YAML and
--set numbers arrive as float64 and Go's integer flags reject "1e+06".
*/}}
{{- define "agent-sandbox.flagArgs" -}}
{{- $values := .values }}
{{- range $key := keys .names | sortAlpha }}
{{- $v := index $values $key }}
{{- if not (kindIs "invalid" $v) }}
{{- if and (kindIs "float64" $v) (eq (float64 (int64 $v)) $v) }}
{{- $v = int64 $v }}
{{- end }}
- {{ printf "--%s=%v" (index $.names $key) $v | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The controller flag behind each flag key of .Values.controller (the
reference chart's camelCase names, plus this project's own flags).
*/}}
{{- define "agent-sandbox.controllerFlagNames" -}}
clusterDomain: cluster-domain
leaderElect: leader-elect
extensions: extensions
leaderElectionNamespace: leader-election-namespace
kubeApiQps: kube-api-qps
kubeApiBurst: kube-api-burst
claimSuccessEvents: claim-success-events
persistClaimObservabilityAnnotations: persist-claim-observability-annotations
referenceCompatibleWrites: reference-compatible-writes
manageLateBindingKey: manage-late-binding-key
sandboxConcurrentWorkers: sandbox-concurrent-workers
sandboxStatusCoalesceWindow: sandbox-status-coalesce-window
sandboxWriteBehindWindow: sandbox-write-behind-window
cacheLabelSelectors: cache-label-selectors
sandboxClaimConcurrentWorkers: sandbox-claim-concurrent-workers
sandboxWarmPoolConcurrentWorkers: sandbox-warm-pool-concurrent-workers
sandboxTemplateConcurrentWorkers: sandbox-template-concurrent-workers
sandboxWarmPoolMaxBatchSize: sandbox-warm-pool-max-batch-size
sandboxWarmPoolReplenishDelay: sandbox-warm-pool-replenish-delay
sandboxWarmPoolMaxRefillRate: sandbox-warm-pool-max-refill-rate
sandboxClaimWarmWait: sandbox-claim-warm-wait
sandboxWarmPoolReadinessGracePeriod: sandbox-warm-pool-readiness-grace-period
sandboxWarmPoolUnschedulableRecheckInterval: sandbox-warm-pool-unschedulable-recheck-interval
enableWarmPoolEviction: enable-warm-pool-eviction
disableClaimEvents: disable-claim-events
disableClaimObservabilityAnnotations: disable-claim-observability-annotations
apiConnections: api-connections
separateWatchConnection: separate-watch-connection
enablePprof: enable-pprof
enablePprofDebug: enable-pprof-debug
pprofBlockProfileRate: pprof-block-profile-rate
pprofMutexProfileFraction: pprof-mutex-profile-fraction
enableTracing: enable-tracing
zapLogLevel: zap-log-level
zapEncoder: zap-encoder
deepHibernation: deep-hibernation
checkpointTimeout: checkpoint-timeout
{{- end }}

{{/*
The router flag behind each key of .Values.router.flags.
*/}}
{{- define "agent-sandbox.routerFlagNames" -}}
authzMode: authz-mode
authzTokenreviewTTL: authz-tokenreview-ttl
authzTokenreviewCacheSize: authz-tokenreview-cache-size
authzTokenreviewRequireToken: authz-tokenreview-require-token
authzTokenreviewAudiences: authz-tokenreview-audiences
authzAccessReview: authz-access-review
authzAccessReviewVerb: authz-access-review-verb
authzAccessReviewTTL: authz-access-review-ttl
authzAccessReviewNegativeTTL: authz-access-review-negative-ttl
authzAccessReviewCacheSize: authz-access-review-cache-size
cacheNamespace: cache-namespace
cacheEnabled: cache-enabled
requireCache: require-cache
proxyTimeout: proxy-timeout
responseHeaderTimeout: response-header-timeout
shutdownTimeout: shutdown-timeout
maxRequestBodyBytes: max-request-body-bytes
upstreamMaxRetries: upstream-max-retries
defaultSandboxPorts: default-sandbox-ports
autoResume: auto-resume
readyTimeout: ready-timeout
idleSuspendAfter: idle-suspend-after
accessLog: access-log
enableTracing: enable-tracing
zapLogLevel: zap-log-level
{{- end }}

{{/*
generatedRules renders the rules of a generated ClusterRole in files/rbac/
(copies of k8s/rbac/{core,extensions}/role.yaml, kept identical by the install
tests).
*/}}
{{- define "agent-sandbox.generatedRules" -}}
{{- $role := .root.Files.Get .file | fromYaml }}
{{- if not $role.rules }}
{{- fail (printf "%s has no rules: copy the generated role.yaml into the chart" .file) }}
{{- end }}
{{- toYaml $role.rules }}
{{- end }}

{{/*
Webhook arguments of the controller. The Service name and namespace are
always passed (the CRDs' clientConfig is patched to match them).
*/}}
{{- define "agent-sandbox.webhookArgs" -}}
- "--enable-webhook={{ .Values.webhook.enabled }}"
- "--webhook-service-name={{ .Values.webhookServiceName }}"
- "--webhook-namespace={{ include "agent-sandbox.namespace" . }}"
{{- if .Values.webhook.enabled }}
- "--webhook-port={{ .Values.webhook.port }}"
- "--manage-webhook-certs={{ .Values.webhook.manageCerts }}"
{{- end }}
{{- if ne .Values.webhook.serveV1alpha1 nil }}
- "--serve-v1alpha1={{ .Values.webhook.serveV1alpha1 }}"
{{- end }}
{{- end }}

/**
 * Metrics: Moleculer's built-in registry rendered by its Prometheus reporter, without the reporter's own HTTP
 * listener (it would open another port on every interface); the gateway and every ops port serve its text.
 * The gateway adds per-route HTTP request counts and latency histograms.
 */
import type { IncomingMessage } from "http";
import { MetricReporters, type ServiceBroker } from "moleculer";

const BasePrometheus = (MetricReporters as any).Prometheus as new (opts?: object) => any;
const BaseReporter = (MetricReporters as any).Base as { prototype: { init(registry: unknown): void } };

/** The Prometheus reporter minus its HTTP server. */
export class TextPrometheusReporter extends BasePrometheus {
	init(registry: any) {
		BaseReporter.prototype.init.call(this, registry);
		this.defaultLabels = typeof this.opts.defaultLabels === "function" ? this.opts.defaultLabels.call(this, registry) : this.opts.defaultLabels;
	}
	stop() {
		return Promise.resolve();
	}
}

export const HTTP_REQUESTS = "gateway.http.requests.total";
export const HTTP_DURATION = "gateway.http.request.duration";

const registered = new WeakSet<object>();

function ensureHttpMetrics(broker: ServiceBroker): boolean {
	if (!broker.isMetricsEnabled()) return false;
	if (!registered.has(broker)) {
		registered.add(broker);
		broker.metrics.register({ type: "counter", name: HTTP_REQUESTS, labelNames: ["method", "route", "status"], description: "HTTP requests by route and status" } as any);
		broker.metrics.register({
			type: "histogram",
			name: HTTP_DURATION,
			labelNames: ["method", "route"],
			unit: "seconds",
			buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
			description: "HTTP request latency by route",
		} as any);
	}
	return true;
}

/** Records one finished request: its route pattern (bounded cardinality), status and latency. */
export function observeHttp(broker: ServiceBroker, req: IncomingMessage & { $alias?: { path?: string; method?: string }; $startedAt?: bigint }, status: number): void {
	if (!ensureHttpMetrics(broker)) return;
	const path = req.$alias?.path;
	const route = path === undefined ? "unmatched" : `/${path.replace(/^\//, "")}`;
	const method = req.method ?? "GET";
	broker.metrics.increment(HTTP_REQUESTS, { method, route, status });
	if (req.$startedAt) broker.metrics.observe(HTTP_DURATION, Number(process.hrtime.bigint() - req.$startedAt) / 1e9, { method, route });
}

export function metricsText(broker: ServiceBroker): string {
	ensureHttpMetrics(broker);
	const reporter = ((broker.metrics as any)?.reporter as any[] | undefined)?.find((r) => r instanceof TextPrometheusReporter);
	return reporter ? reporter.generatePrometheusResponse() : "";
}

/**
 * Metrics: Moleculer's built-in registry rendered by its Prometheus reporter, without the reporter's own HTTP
 * listener (it would open another port on every interface); the gateway and every ops port serve its text.
 * The gateway adds per-route HTTP request counts and latency histograms; every node adds its event-loop delay and
 * how far each peer's clock is from its own (runtime/clock-skew.ts).
 */
import type { IncomingMessage } from "http";
import { monitorEventLoopDelay } from "perf_hooks";
import { MetricReporters, MetricTypes, type BaseMetric, type MetricBaseReporter, type MetricRegistry, type MetricReporterOptions, type ServiceBroker } from "moleculer";
import { watchClockSkew } from "./clock-skew";

/**
 * Moleculer's process metrics read `process._getActiveHandles().length` every 5 s. On Node 20 that call can abort the
 * whole process (`Assertion failed: !obj.IsEmpty()` in `AsyncWrap::GetOwner`, for a handle closing at that moment: it
 * took down test processes holding several platforms). The gauge needs only a count: it is taken from
 * `process.getActiveResourcesInfo()`, which reads no handle's owner (its timers left out, as `_getActiveHandles` leaves
 * them out). Installed once per process, before the first broker starts collecting.
 */
export function countHandlesSafely(): void {
	const p = process as NodeJS.Process & { _getActiveHandles?: () => unknown[] };
	p._getActiveHandles = () => process.getActiveResourcesInfo().filter((type) => type !== "Timeout" && type !== "Immediate");
}

/** Moleculer's Prometheus reporter, with the members it has beyond its typings that this one uses. */
interface PrometheusReporter extends MetricBaseReporter {
	registry: MetricRegistry;
	defaultLabels?: Record<string, unknown>;
}
const BasePrometheus = MetricReporters.Prometheus as unknown as new (opts?: MetricReporterOptions) => PrometheusReporter;
const BaseReporter = MetricReporters.Base;

/** A series of a metric's snapshot, whatever the metric's type (gauge, counter, info, histogram). */
interface SeriesSnapshot {
	labels?: Record<string, unknown>;
	value?: unknown;
	buckets?: Record<string, number>;
	count?: number;
	sum?: number;
}

/** The Prometheus reporter minus its HTTP server. */
export class TextPrometheusReporter extends BasePrometheus {
	init(registry: MetricRegistry) {
		BaseReporter.prototype.init.call(this, registry);
		this.defaultLabels = typeof this.opts.defaultLabels === "function" ? this.opts.defaultLabels.call(this, registry) : this.opts.defaultLabels;
	}
	stop() {
		return Promise.resolve();
	}

	/** The platform's own metrics (`platform.*`, e.g. runtime/clock-skew.ts) are reported whatever the includes say. */
	matchMetricName(name: string): boolean {
		return name.startsWith("platform.") || super.matchMetricName(name);
	}

	/**
	 * The exposition format as Prometheus' own checker (`promtool check metrics`) wants it; moleculer's text breaks
	 * it in ways that upset scrapers and recording rules: snake_case label names (`node_id`, not `nodeID`);
	 * histograms with sorted cumulative `_bucket`s, `+Inf`, `_sum` and `_count` (no `quantile`, `_min`, `_mean`...
	 * series under a histogram); counters named `..._total`; gauges never named `..._total`; no `_rate` series (a
	 * Prometheus computes rates itself); a HELP line on every metric.
	 */
	generatePrometheusResponse(): string {
		const out: string[] = [];
		const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? String(v) : v === Infinity ? "+Inf" : "NaN");
		// A scrape renders every series of every metric (1 600 lines, 240 KB on a platform of 14 services) in one turn of the
		// loop: each item's label text is built once (buckets append only `le`), label names are converted once per scrape.
		const names = new Map<string, string>();
		const labelText = (item: Record<string, unknown> | undefined): string => {
			const all: Record<string, unknown> = { ...(this.defaultLabels ?? {}), ...(item ?? {}) };
			let text = "";
			for (const k in all) {
				let name = names.get(k);
				if (name === undefined) names.set(k, (name = snake(k)));
				text += `${text ? "," : ""}${name}="${escapeLabel(all[k])}"`;
			}
			return text;
		};
		const withLabels = (text: string, extra?: string) => (text ? (extra ? `{${text},${extra}}` : `{${text}}`) : extra ? `{${extra}}` : "");
		this.registry.store.forEach((metric: BaseMetric) => {
			if (!this.matchMetricName(metric.name) || metric.name.startsWith("os.datetime")) return;
			const snapshot: SeriesSnapshot[] = metric.snapshot();
			if (!snapshot.length) return;
			let name = String(this.formatMetricName(metric.name)).replace(/[^a-zA-Z0-9_:]/g, "_");
			const type = metric.type === "info" ? "gauge" : metric.type;
			if (type === "counter" && !name.endsWith("_total")) name += "_total";
			if (type !== "counter" && name.endsWith("_total")) name += /memory|heap/.test(name) ? "_bytes" : "_value";
			const help = String(metric.description || metric.name + (metric.unit ? ` (${metric.unit})` : ""))
				.replace(/\\/g, "\\\\")
				.replace(/\n/g, "\\n");
			out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
			for (const item of snapshot) {
				const text = labelText(item.labels);
				if (metric.type === "info") out.push(`${name}${withLabels(text, `value="${escapeLabel(item.value)}"`)} 1`);
				else if (type === "histogram") {
					const buckets = item.buckets ?? {};
					const les = Object.keys(buckets)
						.map(Number)
						.sort((a, b) => a - b);
					for (const le of les) out.push(`${name}_bucket${withLabels(text, `le="${le}"`)} ${num(buckets[le])}`);
					out.push(`${name}_bucket${withLabels(text, 'le="+Inf"')} ${num(item.count ?? 0)}`);
					out.push(`${name}_sum${withLabels(text)} ${num(item.sum ?? 0)}`);
					out.push(`${name}_count${withLabels(text)} ${num(item.count ?? 0)}`);
				} else out.push(`${name}${withLabels(text)} ${num(item.value)}`);
			}
			out.push("");
		});
		return out.join("\n");
	}
}

/** A label value in the exposition format: backslash, newline and double quote escaped. */
function escapeLabel(v: unknown): string {
	const s = String(v ?? "");
	return /[\\\n"]/.test(s) ? s.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"') : s;
}

/** `nodeID` → `node_id`, `heapSize` → `heap_size`; already snake names stay. */
function snake(k: string): string {
	return k
		.replace(/([a-z0-9])([A-Z])/g, "$1_$2")
		.replace(/([A-Z])([A-Z][a-z])/g, "$1_$2")
		.replace(/[^a-zA-Z0-9_]/g, "_")
		.toLowerCase();
}

export const HTTP_REQUESTS = "gateway.http.requests.total";
export const HTTP_DURATION = "gateway.http.request.duration";
export const LOOP_DELAY_P99 = "process.eventloop.delay.p99.seconds";
export const LOOP_DELAY_MAX = "process.eventloop.delay.max.seconds";

// ---------------------------------------------------------------------------------------------------------------
// Event-loop delay

/** How often the monitor's timer samples the loop (ms): a delay is how late that timer fires. */
const LOOP_RESOLUTION_MS = 10;
/** The reported delay covers the last LOOP_SLOTS slots of LOOP_SLOT_MS (one minute), the current one included. */
const LOOP_SLOT_MS = 5000;
const LOOP_SLOTS = 12;

/** Event-loop delay in milliseconds (0.1 ms): `p99` of the worst slot of the window, `max` over the window. */
export interface LoopDelay {
	p99: number;
	max: number;
}

/**
 * The process's event-loop delay (node's monitorEventLoopDelay), over a sliding window of one minute: the histogram is
 * read and reset every LOOP_SLOT_MS, and the last LOOP_SLOTS readings are kept. The monitor runs while a broker of the
 * process runs (the Lean metrics middleware starts and stops it); node reports the time between two samples, the
 * resolution is subtracted so that an idle loop reads 0.
 */
class LoopDelayMonitor {
	private readonly histogram = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
	private slots: LoopDelay[] = [];
	private timer?: NodeJS.Timeout;
	private readonly users = new Set<object>();

	start(user: object): void {
		if (this.users.has(user)) return;
		this.users.add(user);
		if (this.users.size > 1) return;
		this.histogram.enable();
		this.timer = setInterval(() => this.rotate(), LOOP_SLOT_MS);
		this.timer.unref();
	}

	stop(user: object): void {
		if (!this.users.delete(user) || this.users.size > 0) return;
		clearInterval(this.timer);
		this.histogram.disable();
		this.histogram.reset();
		this.slots = [];
	}

	/** The delay over the window; zeros when the monitor is not running or has no sample yet. */
	read(): LoopDelay {
		let { p99, max } = this.current();
		for (const s of this.slots) {
			if (s.p99 > p99) p99 = s.p99;
			if (s.max > max) max = s.max;
		}
		return { p99, max };
	}

	private current(): LoopDelay {
		if (this.histogram.count === 0) return { p99: 0, max: 0 };
		const ms = (ns: number) => Math.max(0, Math.round((ns / 1e6 - LOOP_RESOLUTION_MS) * 10) / 10);
		return { p99: ms(this.histogram.percentile(99)), max: ms(this.histogram.max) };
	}

	private rotate(): void {
		this.slots.push(this.current());
		if (this.slots.length >= LOOP_SLOTS) this.slots.shift();
		this.histogram.reset();
	}
}

const loopDelay = new LoopDelayMonitor();

/** This process's event-loop delay over the last minute (ms), as /status and /metrics report it. */
export function eventLoopDelay(): LoopDelay {
	return loopDelay.read();
}

const registered = new WeakSet<object>();

function ensureMetrics(broker: ServiceBroker): boolean {
	if (!broker.isMetricsEnabled()) return false;
	if (!registered.has(broker)) {
		registered.add(broker);
		broker.metrics.register({ type: "gauge", name: LOOP_DELAY_P99, unit: "seconds", description: "Event-loop delay, 99th percentile of the worst 5 s of the last minute" });
		broker.metrics.register({ type: "gauge", name: LOOP_DELAY_MAX, unit: "seconds", description: "Event-loop delay, longest of the last minute" });
		broker.metrics.register({ type: "counter", name: HTTP_REQUESTS, labelNames: ["method", "route", "status"], description: "HTTP requests by route and status" });
		broker.metrics.register({
			type: "histogram",
			name: HTTP_DURATION,
			labelNames: ["method", "route"],
			unit: "seconds",
			buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
			description: "HTTP request latency by route",
		});
	}
	return true;
}

/**
 * Moleculer's own metrics (moleculer.request.*, moleculer.event.*) register every histogram with quantiles and every
 * counter with a rate: on every action call each of them updates a time window of quantiles and a rate estimate
 * that /metrics never exports (see generatePrometheusResponse). Registered without them: counts, sums and buckets
 * stay as they were, the per-call work that fed nothing is gone. A broker middleware, listed before Moleculer's
 * internal ones so that its `created` runs before their metrics are registered.
 */
export const LeanMetricsMiddleware = {
	name: "LeanMetrics",
	// The event-loop delay is measured while a broker runs (several brokers of one process share the monitor).
	started(broker: ServiceBroker) {
		loopDelay.start(broker);
	},
	stopped(broker: ServiceBroker) {
		loopDelay.stop(broker);
	},
	created(broker: ServiceBroker) {
		if (!broker.isMetricsEnabled()) return;
		watchClockSkew(broker);
		const registry = broker.metrics as unknown as { register(opts: Record<string, unknown>): unknown };
		const register = registry.register.bind(registry);
		registry.register = (opts) => {
			const metric = register(opts && typeof opts === "object" ? { ...opts, quantiles: false, rate: false } : opts) as Histogram | null;
			if (metric?.type === "histogram" && Array.isArray(metric.buckets)) {
				metric.bucketKeys = metric.buckets.map(String);
				metric.observe = observeBuckets;
			}
			return metric;
		};
	},
};

/** What observeBuckets uses of Moleculer's histogram (0.14). */
interface Histogram {
	type: string;
	buckets?: number[];
	bucketKeys?: string[];
	values: Map<string, { sum: number; count: number; lastValue: number; timestamp: number; bucketValues?: Record<string, number> }>;
	hashingLabels(labels: unknown): string;
	changed(value: number, labels: unknown, timestamp?: number): void;
	observe(value: number, labels?: unknown, timestamp?: number): unknown;
}
const histogramObserve = MetricTypes.Histogram.prototype.observe as Histogram["observe"];

/**
 * Moleculer's histogram observe, for a histogram without quantiles and rate, with its bucket keys as strings once
 * (Moleculer indexes its bucket counts by the bound as a number: a number-to-string conversion per bucket per
 * observation). A new label set goes through Moleculer's own code, which creates its entry.
 */
function observeBuckets(this: Histogram, value: number, labels?: unknown, timestamp?: number): unknown {
	const item = this.values.get(this.hashingLabels(labels));
	if (!item) return histogramObserve.call(this, value, labels, timestamp);
	item.timestamp = timestamp == null ? Date.now() : timestamp;
	item.sum += value;
	item.count++;
	item.lastValue = value;
	const counts = item.bucketValues;
	if (counts) {
		const bounds = this.buckets!;
		const keys = this.bucketKeys!;
		for (let i = 0; i < bounds.length; i++) if (value <= bounds[i]) counts[keys[i]] += 1;
	}
	this.changed(value, labels, timestamp);
	return item;
}

/** `/content/notes/:id` per alias path (the route label of the HTTP metrics). */
const routeLabels = new Map<string, string>();
function routeLabel(path: string | undefined): string {
	if (path === undefined) return "unmatched";
	let label = routeLabels.get(path);
	// Alias paths come from the route table: a bounded set.
	if (label === undefined) routeLabels.set(path, (label = `/${path.replace(/^\//, "")}`));
	return label;
}

/** Records one finished request: its route pattern (bounded cardinality), status and latency. */
export function observeHttp(broker: ServiceBroker, req: IncomingMessage & { $alias?: { path?: string; method?: string }; $startedAt?: bigint }, status: number): void {
	if (!ensureMetrics(broker)) return;
	const route = routeLabel(req.$alias?.path);
	const method = req.method ?? "GET";
	broker.metrics.increment(HTTP_REQUESTS, { method, route, status });
	if (req.$startedAt) broker.metrics.observe(HTTP_DURATION, Number(process.hrtime.bigint() - req.$startedAt) / 1e9, { method, route });
}

export function metricsText(broker: ServiceBroker): string {
	if (ensureMetrics(broker)) {
		const { p99, max } = loopDelay.read();
		broker.metrics.set(LOOP_DELAY_P99, p99 / 1000);
		broker.metrics.set(LOOP_DELAY_MAX, max / 1000);
	}
	const reporter = broker.metrics?.reporter?.find((r): r is TextPrometheusReporter => r instanceof TextPrometheusReporter);
	return reporter ? reporter.generatePrometheusResponse() : "";
}

/** `platform_dependency_up{dependency}`: each entry of the gateway's last /status (dependencies and services), 1 up, 0 down. */
export const DEPENDENCY_UP = "platform.dependency.up";

/** Records a /status answer as DEPENDENCY_UP gauges (dashboards and alerts read the stores' health from them). */
export function recordHealth(broker: ServiceBroker, info: Record<string, { status: string }>): void {
	if (!broker.isMetricsEnabled()) return;
	if (!broker.metrics.hasMetric(DEPENDENCY_UP))
		broker.metrics.register({
			type: "gauge",
			name: DEPENDENCY_UP,
			labelNames: ["dependency"],
			description: "1 while a dependency (or service) the gateway's /status names is up, 0 while down",
		} as never);
	for (const [dependency, s] of Object.entries(info)) broker.metrics.set(DEPENDENCY_UP, s.status === "up" ? 1 : 0, { dependency });
}

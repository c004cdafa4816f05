/**
 * The dispatcher's metrics, per webhook config (labels `config` and `client`): attempts, failed attempts by reason, the
 * delay from a change to its delivery, and whether the config's circuit breaker is open. One process labels at most
 * LABELLED_CONFIGS configs, the first it meets: the deliveries of any further config are counted under `config="other"`,
 * `client="other"`, so that a platform with many tenants keeps a bounded number of series (about 20 per config).
 */
import type { ServiceBroker } from "moleculer";

export const WEBHOOK_ATTEMPTS = "dispatcher.webhook.attempts.total";
export const WEBHOOK_FAILURES = "dispatcher.webhook.failures.total";
export const WEBHOOK_LAG = "dispatcher.webhook.lag.seconds";
export const WEBHOOK_CIRCUIT = "dispatcher.webhook.circuit.open";

/** Configs with labels of their own per process; the rest share `other`. */
export const LABELLED_CONFIGS = 200;

/** Why an attempt failed: an HTTP answer other than 2xx, no answer in time, no connection, no address, a refused address. */
export type FailureReason = "http" | "timeout" | "network" | "dns" | "refused";

/** Lag buckets (s): a healthy webhook's deliveries fall in the first ones, retried ones along the retry schedule's delays. */
const LAG_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 36000];

type Labels = { config: string; client: string };
const OTHER: Labels = { config: "other", client: "other" };

export class WebhookMetrics {
	private readonly labels = new Map<string, Labels>();

	private constructor(private readonly broker: ServiceBroker) {}

	/** The dispatcher's metrics on the broker's registry; undefined when the broker reports no metrics. */
	static of(broker: ServiceBroker): WebhookMetrics | undefined {
		if (!broker.isMetricsEnabled()) return undefined;
		const m = broker.metrics;
		if (!m.hasMetric(WEBHOOK_ATTEMPTS))
			m.register({
				type: "counter",
				name: WEBHOOK_ATTEMPTS,
				labelNames: ["config", "client"],
				description: "Webhook delivery attempts (HTTP requests, and attempts that found no address) per CQRS config",
			} as never);
		if (!m.hasMetric(WEBHOOK_FAILURES))
			m.register({
				type: "counter",
				name: WEBHOOK_FAILURES,
				labelNames: ["config", "client", "reason"],
				description: "Failed webhook delivery attempts per CQRS config, by reason (http, timeout, network, dns, refused)",
			} as never);
		if (!m.hasMetric(WEBHOOK_LAG))
			m.register({
				type: "histogram",
				name: WEBHOOK_LAG,
				labelNames: ["config", "client"],
				unit: "seconds",
				buckets: LAG_BUCKETS,
				description: "Delay from a change (its ts_ms) to its delivery's 2xx answer, per CQRS config",
			} as never);
		if (!m.hasMetric(WEBHOOK_CIRCUIT))
			m.register({
				type: "gauge",
				name: WEBHOOK_CIRCUIT,
				labelNames: ["config", "client"],
				description: "1 while the CQRS config's circuit breaker holds its deliveries back (open or half open)",
			} as never);
		return new WebhookMetrics(broker);
	}

	private labelsOf(configId: string, clientId: string): Labels {
		let l = this.labels.get(configId);
		if (l) return l;
		if (this.labels.size >= LABELLED_CONFIGS) return OTHER;
		this.labels.set(configId, (l = { config: configId, client: clientId }));
		return l;
	}

	/** One attempt: failed (with its reason) unless `reason` is undefined. */
	attempt(configId: string, clientId: string, reason?: FailureReason): void {
		const labels = this.labelsOf(configId, clientId);
		this.broker.metrics.increment(WEBHOOK_ATTEMPTS, labels);
		if (reason) this.broker.metrics.increment(WEBHOOK_FAILURES, { ...labels, reason });
	}

	/** A delivery answered 2xx: its delay since the change was written (the event's ts_ms). */
	delivered(configId: string, clientId: string, tsMs: number): void {
		this.broker.metrics.observe(WEBHOOK_LAG, Math.max(0, Date.now() - tsMs) / 1000, this.labelsOf(configId, clientId));
	}

	/** The config's breaker opened or closed (not reported for the configs counted under `other`: one gauge cannot say it for all). */
	circuit(configId: string, clientId: string, open: boolean): void {
		const labels = this.labelsOf(configId, clientId);
		if (labels !== OTHER) this.broker.metrics.set(WEBHOOK_CIRCUIT, open ? 1 : 0, labels);
	}
}

/** The one place for broker settings: transporter, logging, metrics, middlewares. */
import os from "os";
import type { BrokerOptions } from "moleculer";
import type { PlatformConfig } from "./lib/config";
import { AuthorityMiddleware } from "./middlewares/authority";
import { TextPrometheusReporter } from "./lib/metrics";
import { channelsMiddleware } from "./workers/channels.stream";
import { UnitOfWorkMiddleware } from "./mixins/stores/unit.middleware";

export function brokerOptions(cfg: PlatformConfig): BrokerOptions {
	return {
		namespace: cfg.namespace,
		nodeID: cfg.nodeId ?? `${os.hostname()}-${process.pid}`,
		// No transporter: every service in one process, calls stay local. NATS in production.
		transporter: cfg.transporter ?? null,
		logger: { type: "Console", options: { level: cfg.logLevel, formatter: "short", colors: process.stdout.isTTY } },
		requestTimeout: 30_000,
		registry: { strategy: "RoundRobin", preferLocal: true },
		metrics: {
			enabled: true,
			// Rendered by the gateway's /metrics (and each ops port), not by a listener of its own.
			reporter: [new TextPrometheusReporter({ includes: ["moleculer.request.**", "moleculer.event.**", "moleculer.transit.**", "gateway.**", "publisher.**", "preserver.**", "process.**", "os.memory.**"] }) as any],
		},
		tracing: { enabled: false },
		// The production event stream (EVENT_STREAM=nats|redis): @moleculer/channels, see workers/channels.stream.ts.
		middlewares: [UnitOfWorkMiddleware, AuthorityMiddleware, ...(cfg.eventStream && cfg.eventStream !== "outbox" ? [channelsMiddleware(cfg)] : [])],
	};
}

export default brokerOptions;

/** The one place for broker settings: transporter, logging, metrics, middlewares. */
import os from "os";
import type { BrokerOptions, Middleware } from "moleculer";
import type { PlatformConfig } from "./lib/config";
import { AuthorityMiddleware } from "./middlewares/authority";
import { TextPrometheusReporter } from "./lib/metrics";
import { channelsMiddleware } from "./events/channels.stream";
import { UnitOfWorkMiddleware } from "./mixins/stores/unit.middleware";
import { replCommands, ReplPrincipalMiddleware } from "./lib/repl";

export function brokerOptions(cfg?: PlatformConfig): BrokerOptions {
	// Called without a configuration by moleculer-runner (`moleculer-runner --config moleculer.config.ts --repl`):
	// the environment's, and the platform's services are created with the broker (see runnerOptions).
	if (!cfg || typeof (cfg as Partial<PlatformConfig>).dataDir !== "string") return runnerOptions();
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
		// The production event stream (EVENT_STREAM=nats|redis): @moleculer/channels, see events/channels.stream.ts.
		middlewares: [UnitOfWorkMiddleware, AuthorityMiddleware, ReplPrincipalMiddleware as unknown as Middleware, ...(cfg.eventStream && cfg.eventStream !== "outbox" ? [channelsMiddleware(cfg)] : [])],
		// The operator's REPL: `as <username|client id>`, `whoami`, `unas` (lib/repl.ts).
		replCommands: replCommands() as BrokerOptions["replCommands"],
	};
}

/** The platform as moleculer-runner starts it: configuration from the environment, every service (or SERVICES). */
function runnerOptions(): BrokerOptions {
	// eslint-disable-next-line @typescript-eslint/no-var-requires
	const { readConfig, bindConfig, privateDataDir } = require("./lib/config") as typeof import("./lib/config");
	const cfg = readConfig();
	privateDataDir(cfg.dataDir);
	return {
		...brokerOptions(cfg),
		created(broker) {
			bindConfig(broker, cfg);
			// eslint-disable-next-line @typescript-eslint/no-var-requires
			const { serviceCatalog } = require("./services") as typeof import("./services");
			const all = serviceCatalog(cfg);
			for (const n of cfg.services ?? Object.keys(all)) {
				if (!all[n]) throw new Error(`unknown service ${n}; known: ${Object.keys(all).join(", ")}`);
				broker.createService(all[n]);
			}
		},
	};
}

export default brokerOptions;

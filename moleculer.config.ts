/** The one place for broker settings: transporter, logging, metrics, middlewares. */
import type { BrokerOptions, MetricsReporterOptions, Middleware } from "moleculer";
import type { PlatformConfig } from "./runtime/config";
import { AuthorityMiddleware } from "./authority/authority";
import { countHandlesSafely, LeanMetricsMiddleware, TextPrometheusReporter } from "./runtime/metrics";
import { channelsMiddleware } from "./events/channels.stream";
import { unitOfWorkMiddlewares } from "./stores/unit.middleware";
import os from "os";
import { replCommands, ReplPrincipalMiddleware } from "./runtime/repl";
import { claimNodeId, transportFailure } from "./runtime/failover";
import { FailoverDiscoverer } from "./runtime/failover-discoverer";
import { FailoverMiddleware } from "./runtime/failover.middleware";
import { NodeStoppingMiddleware } from "./runtime/node-stopping";
import { transporterOption } from "./runtime/transport-watch";

export function brokerOptions(cfg: PlatformConfig): BrokerOptions;
export function brokerOptions(): Promise<BrokerOptions>;
export function brokerOptions(cfg?: PlatformConfig): BrokerOptions | Promise<BrokerOptions> {
	// Called without a configuration by moleculer-runner (`moleculer-runner --config moleculer.config.ts --repl`):
	// the environment's, and the platform's services are created with the broker (see runnerOptions).
	if (!cfg || typeof (cfg as Partial<PlatformConfig>).dataDir !== "string") return runnerOptions();
	countHandlesSafely();
	return {
		namespace: cfg.namespace,
		// Failover (docs/production.md): the same id after a restart, dead peers dropped within the heartbeat timeout,
		// calls that never ran (or reads) sent again to another node, endpoints that keep failing left out a while.
		nodeID: cfg.nodeId ?? claimNodeId(cfg),
		// No transporter: every service in one process, calls stay local. NATS in production, pinged every 2 s
		// (runtime/transport-watch.ts: a connection gone silent is given up within seconds).
		transporter: transporterOption(cfg.transporter),
		logger: loggerOption(cfg),
		requestTimeout: cfg.requestTimeoutMs,
		// A service that waits for others (auth for domain, identity, context) looks every 50 ms, not every second:
		// a node's start is about a second shorter (the check reads the local registry only).
		dependencyInterval: 50,
		heartbeatInterval: cfg.heartbeatIntervalMs / 1000,
		heartbeatTimeout: cfg.heartbeatTimeoutMs / 1000,
		registry: { strategy: "RoundRobin", preferLocal: true, discoverer: new FailoverDiscoverer() },
		circuitBreaker: { enabled: true, threshold: 0.5, minRequestCount: 10, windowTime: 30, halfOpenTime: 5000, check: transportFailure },
		// A stopping node first tells its peers it serves nothing (Moleculer's empty INFO), then finishes the requests
		// it holds before it disconnects.
		tracking: { enabled: true, shutdownTimeout: 10_000 },
		metrics: {
			enabled: true,
			// Memory, event loop and OS figures whatever NODE_ENV says (Moleculer leaves them out under NODE_ENV=test).
			collectProcessMetrics: true,
			// Rendered by the gateway's /metrics (and each ops port), not by a listener of its own.
			// The registry's view of the cluster (nodes, endpoints per service and per event) tells an operator which
			// replicas and listeners this node knows; its per-action endpoints (hundreds of lines) are left out.
			reporter: [
				// Moleculer takes a reporter instance where its typings name only a reporter's options.
				new TextPrometheusReporter({
					includes: [
						"moleculer.request.**",
						"moleculer.event.**",
						"moleculer.transit.**",
						"moleculer.registry.nodes.**",
						"moleculer.registry.service.endpoints.**",
						"moleculer.registry.event.endpoints.**",
						"gateway.**",
						"publisher.**",
						"preserver.**",
						"dispatcher.**",
						"process.**",
						"os.memory.**",
					],
				}) as unknown as MetricsReporterOptions,
			],
		},
		tracing: { enabled: false },
		// The production event stream (EVENT_STREAM=nats|redis): @moleculer/channels, see events/channels.stream.ts.
		middlewares: [
			LeanMetricsMiddleware as unknown as Middleware,
			NodeStoppingMiddleware,
			FailoverMiddleware(cfg.failoverWaitMs) as unknown as Middleware,
			...unitOfWorkMiddlewares(cfg.requestDbDeadlineMs),
			AuthorityMiddleware,
			ReplPrincipalMiddleware as unknown as Middleware,
			...(cfg.eventStream && cfg.eventStream !== "outbox" ? [channelsMiddleware(cfg)] : []),
		],
		// The operator's REPL: `as <username|client id>`, `whoami`, `unas` (runtime/repl.ts).
		replCommands: replCommands() as BrokerOptions["replCommands"],
	};
}

/**
 * Moleculer's console logger at LOG_LEVEL: `short` lines (coloured on a terminal), or with LOG_FORMAT=json one JSON
 * object a line (`ts`, `level`, `msg`, `nodeID`, `ns`, `mod`, `svc`), never coloured, for log shippers.
 */
function loggerOption(cfg: PlatformConfig): BrokerOptions["logger"] {
	const json = cfg.logFormat === "json";
	return { type: "Console", options: { level: cfg.logLevel, formatter: json ? "json" : "short", colors: !json && process.stdout.isTTY } };
}

/**
 * The operators' console on a deployment (TRANSPORTER set; runtime/repl.ts): a node of its own in the namespace, with no
 * service and no store, whose REPL sees and calls the cluster. Its id (`console-<hostname>-<pid>`, never NODE_ID,
 * which names a node of the deployment) says what it is; nothing of DATA_DIR is read or claimed.
 */
export function consoleNodeOptions(cfg: PlatformConfig): BrokerOptions {
	const nodeID = `console-${os.hostname()}-${process.pid}`;
	return {
		...brokerOptions({ ...cfg, nodeId: nodeID }),
		metrics: { enabled: false },
		middlewares: [FailoverMiddleware(cfg.failoverWaitMs) as unknown as Middleware, ReplPrincipalMiddleware as unknown as Middleware],
		started(broker) {
			const nodes = (broker.registry as unknown as { getNodeList(o: object): Array<{ id: string }> }).getNodeList({ onlyAvailable: true, withServices: false });
			const others = nodes.filter((n) => n.id !== nodeID).length;
			console.log(`>> Console node ${nodeID} joined namespace ${cfg.namespace}: ${others} other node(s); \`exit\` leaves`);
		},
	};
}

/** The platform as moleculer-runner starts it: configuration from the environment, every service (or SERVICES). */
async function runnerOptions(): Promise<BrokerOptions> {
	const { readConfig, privateDataDir } = require("./runtime/config") as typeof import("./runtime/config");
	const { lockDataDir, DataDirInUse } = require("./runtime/datadir-lock") as typeof import("./runtime/datadir-lock");
	const { attachToDataDir, consoleSessions } = require("./runtime/repl") as typeof import("./runtime/repl");
	const cfg = readConfig();
	// `--repl` attaches to what runs, as `npm run repl` does (runtime/repl.ts): the deployment, else the platform on DATA_DIR.
	const repl = process.argv.includes("--repl") || process.argv.includes("-r");
	if (repl && cfg.transporter) return consoleNodeOptions(cfg);
	if (repl && process.stdin.isTTY) {
		const status = await attachToDataDir(cfg);
		if (status !== undefined) process.exit(status);
	}
	// DATA_DIR first, as start.ts takes it (runtime/datadir-lock.ts); given back once the broker has stopped.
	const lock = await lockDataDir(cfg).catch((err) => {
		if (!(err instanceof DataDirInUse)) throw err;
		console.error(err.message);
		process.exit(1);
	});
	privateDataDir(cfg.dataDir);
	const { nodeOptions } = require("./platform") as typeof import("./platform");
	const node = nodeOptions(cfg);
	return {
		...node,
		// Consoles attach through the DATA_DIR socket once every service has started.
		started: (broker) => lock?.serveConsoles(consoleSessions(broker)),
		async stopped(broker) {
			await node.stopped?.(broker);
			await lock?.release();
		},
	};
}

export default brokerOptions;

/**
 * Gives a service its own ops port: `GET /status` (the service's own `health` action) and `GET /metrics` (this
 * node's metrics) on its spec port plus OPS_PORT_OFFSET, bound to HOST. On when SERVICE_PORTS=1, or when the
 * node runs without the gateway (SERVICES without `api`); off in the one-process default, where the gateway's
 * /status reports every service. Domain services get it through the collection mixin; workers add it themselves.
 */
import type { IncomingMessage, Server, ServerResponse } from "http";
import type { Service, ServiceSchema } from "moleculer";
import { asSchema } from "../lib/service";
import { configOf, type PlatformConfig } from "../runtime/config";
import { HEALTH_ACTION, type Health } from "../runtime/health";
import { metricsText } from "../runtime/metrics";
import { startOpsServer, stopOpsServer } from "../runtime/ops-server";

const STARTING: Health = { status: "error", info: { node: { status: "down", message: "starting" } } };

/** Whether this node serves the per-service ops ports. */
export function opsPortsEnabled(cfg: Pick<PlatformConfig, "servicePorts" | "services">): boolean {
	return cfg.servicePorts ?? (cfg.services !== undefined && !cfg.services.includes("api"));
}

export function opsPort(specPort: number, cfg: Pick<PlatformConfig, "opsPortOffset">): number {
	return specPort + (cfg.opsPortOffset ?? 0);
}

/** A service with an ops port (lib/service.ts): its server while started, and the extra routes it may serve. */
type OpsService = Service & {
	opsServer?: Server;
	opsRoute?: (req: IncomingMessage, res: ServerResponse) => Promise<boolean>;
};

export function opsPortMixin(specPort: number): Partial<ServiceSchema> {
	return asSchema<OpsService>({
		async started(this: OpsService) {
			const cfg = configOf(this.broker);
			if (!opsPortsEnabled(cfg)) return;
			const port = opsPort(specPort, cfg);
			const health = this.actions?.[HEALTH_ACTION] as undefined | (() => Promise<Health>);
			try {
				this.opsServer = (await startOpsServer({
					host: cfg.host,
					port,
					// Ready once the whole node has started and announced its services (FailoverDiscoverer): before, the
					// other nodes neither call it nor send it broadcasts.
					status: async () => (!this.broker.started ? STARTING : health ? health() : { status: "ok", info: {} }),
					metrics: () => metricsText(this.broker),
					metricsToken: cfg.metricsToken,
					// A service may serve more on its port (the preserver: MQTT hooks) through an `opsRoute` method.
					extra: typeof this.opsRoute === "function" ? (req, res) => this.opsRoute!(req, res) : undefined,
				})) as Server;
			} catch (err) {
				const e = err as NodeJS.ErrnoException;
				throw new Error(
					`${this.name}: cannot serve /status and /metrics on ${cfg.host}:${port} (${e.code ?? e.message}); ` +
						`free the port, shift it with OPS_PORT_OFFSET, or set SERVICE_PORTS=0`,
					{ cause: err },
				);
			}
			this.logger.info(`${this.name}: /status and /metrics on http://${cfg.host}:${port}`);
		},
		async stopped(this: OpsService) {
			await stopOpsServer(this.opsServer);
			this.opsServer = undefined;
		},
	});
}

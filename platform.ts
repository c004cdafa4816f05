/** Builds and starts a node of the platform: every service (default) or the subset named by SERVICES. */
import { ServiceBroker, type BrokerOptions, type Middleware } from "moleculer";
import { brokerOptions } from "./moleculer.config";
import { bindConfig, privateDataDir, readConfig, StartupError, type PlatformConfig } from "./runtime/config";
import net from "net";
import path from "path";
import { closeSharedKeyValues, MemoryKeyValue, sharedKeyValue } from "./runtime/kv";
import { closeSharedStreams, stopConsumers } from "./events/stream";
import { relayService } from "./events/relay";
import { DOMAINS } from "./catalog";
import { serviceCatalog } from "./services";
import { workerCatalog } from "./workers";
import { NODE_STOPPING } from "./runtime/node-stopping";
import { grantCache } from "./authority/grant-cache";
import { setPgLog } from "./runtime/pg-process";
import { lockDataDir, type DataDirLock } from "./runtime/datadir-lock";
import { unmigratedDataDir } from "./store-migration";

export interface Platform {
	broker: ServiceBroker;
	cfg: PlatformConfig;
	/** Base URL of the gateway when this node runs it. */
	url?: string;
	stop(): Promise<void>;
}

/**
 * `lock`: DATA_DIR already taken by the caller (start.ts takes it before loading the platform); else taken here, before
 * anything reads or writes the directory. Either way the platform gives it back last at its stop, or when its start fails.
 */
export async function startPlatform(overrides: Partial<PlatformConfig> = {}, lock?: DataDirLock): Promise<Platform> {
	const cfg = { ...readConfig(), ...overrides };
	// The documents of an earlier version's store are moved by a command of their own, never read here.
	const unmigrated = unmigratedDataDir(cfg.dataDir);
	if (unmigrated) throw new StartupError(unmigrated);
	// One process per DATA_DIR with an embedded store: a second one exits here, having touched nothing (runtime/datadir-lock.ts).
	lock ??= await lockDataDir(cfg);
	try {
		return await start(cfg, lock);
	} catch (err) {
		await lock?.release();
		throw err;
	}
}

/** StartupError naming PORT when `port` cannot be bound on `host` now. */
function portFree(port: number, host: string): Promise<void> {
	return new Promise((resolve, reject) => {
		const probe = net.createServer();
		probe.once("error", (err: NodeJS.ErrnoException) =>
			reject(new StartupError(`port ${port} (PORT) ${err.code === "EADDRINUSE" ? "is in use" : `cannot be bound on ${host} (${err.code ?? err.message})`}`)),
		);
		probe.listen(port, host, () => probe.close(() => resolve()));
	});
}

/**
 * The one composition root: the broker options of a node of the platform, whoever starts it (startPlatform for
 * `npm start` and the tests, moleculer.config.ts's runnerOptions for `npm run runner`). Both paths build the same node:
 * the configuration bound to the broker (services read it through configOf), the cache's persistence, the services
 * and workers named by SERVICES (every one by default), and the relay that feeds EVENT_STREAM=nats|redis from the
 * outbox wherever a domain service appends to it; at a stop the consumer groups end before the services, the streams
 * and the cache close after them.
 */
export function nodeOptions(cfg: PlatformConfig): BrokerOptions {
	const all = { ...serviceCatalog(cfg), ...workerCatalog() };
	const names = cfg.services ?? Object.keys(all);
	const unknown = names.filter((n) => !all[n]);
	if (unknown.length) throw new StartupError(`unknown service ${unknown.join(", ")} (SERVICES); known: ${Object.keys(all).join(", ")}`);
	const base = brokerOptions(cfg);
	return {
		...base,
		// The consumer groups stop once their events in progress are handled, before any service stops (Moleculer stops
		// services in parallel: a worker's handler would otherwise call a service or store that is already stopping).
		middlewares: [...(base.middlewares ?? []), { name: "ConsumersFirst", stopping: () => stopConsumers(cfg) } as unknown as Middleware],
		created(broker) {
			bindConfig(broker, cfg);
			// The embedded cache keeps its login failure counters across a restart (DATA_DIR/cache.json, mode 0600).
			const kv = sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
			if (kv instanceof MemoryKeyValue) kv.persistTo(path.join(cfg.dataDir, "cache.json"));
			// The grant index is per process; a new node in the same process (tests) must not see the last one's.
			grantCache.invalidate();
			setPgLog(broker.getLogger("postgres"));
			for (const n of names) broker.createService(all[n]);
			// The nodes that append to the outbox feed the production event stream (events/relay.ts).
			if (cfg.eventStream && cfg.eventStream !== "outbox" && names.some((n) => DOMAINS.some((d) => d.name === n))) broker.createService(relayService());
		},
		// The embedded PostgreSQL stops with its last user: there, on the PostgreSQL document store, the outbox and the
		// groups' positions; so the streams close after every service, then the cache.
		async stopped(broker) {
			const log = broker.getLogger("platform");
			log.info("stop: services and workers stopped");
			await closeSharedStreams(cfg);
			log.info("stop: event streams closed");
			await closeSharedKeyValues();
			log.info("stop: cache closed");
		},
	};
}

async function start(cfg: PlatformConfig, lock: DataDirLock | undefined): Promise<Platform> {
	// DATA_DIR holds password hashes, keys and the audit store: its owner's only (every file in it is 0600).
	privateDataDir(cfg.dataDir);
	// A busy PORT is said in one line before anything starts (not after every service started and stopped again).
	if ((cfg.services ?? ["api"]).includes("api") && cfg.port > 0) await portFree(cfg.port, cfg.host);
	// Signals are the caller's (start.ts stops in order); moleculer's own handler would stop the broker in parallel.
	const broker = new ServiceBroker({ ...nodeOptions(cfg), skipProcessEventRegistration: true });
	const log = broker.getLogger("platform");
	await broker.start();
	const api = broker.getLocalService("api") as unknown as { server?: import("http").Server } | undefined;
	const addr = api?.server?.address();
	const url = addr && typeof addr === "object" ? `http://${cfg.host}:${addr.port}` : undefined;
	return {
		broker,
		cfg,
		url,
		/**
		 * In dependency order, each step logged: the gateway stops taking requests; the consumer groups stop once their
		 * events in progress are handled; the services and workers stop; then the event streams and the cache close
		 * (nodeOptions' hooks); then DATA_DIR is given back.
		 */
		async stop() {
			// Streams that end only when the gateway lets them (live cursors) end first: the gateway's stop waits for
			// the requests it holds (runtime/node-stopping.ts does the same for a bare broker.stop()).
			await broker.broadcastLocal(NODE_STOPPING);
			const api = broker.getLocalService("api");
			if (api) {
				await broker.destroyService(api);
				log.info("stop: gateway closed (no new requests)");
			}
			await stopConsumers(cfg);
			log.info("stop: event consumers stopped");
			await broker.stop();
			await lock?.release();
			log.info("stop: DATA_DIR given back; stopped");
		},
	};
}

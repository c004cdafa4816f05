/** Builds and starts a node of the platform: every service (default) or the subset named by SERVICES. */
import { ServiceBroker } from "moleculer";
import brokerOptions from "./moleculer.config";
import { bindConfig, documentStoreFor, privateDataDir, readConfig, type PlatformConfig } from "./runtime/config";
import path from "path";
import { closeSharedKeyValues, MemoryKeyValue, sharedKeyValue } from "./runtime/kv";
import { closeSharedStreams, stopConsumers } from "./events/stream";
import { relayService } from "./events/relay";
import { DOMAINS } from "./catalog";
import { serviceCatalog } from "./services";
import { workerCatalog } from "./workers";
import { NODE_STOPPING } from "./middlewares/node-stopping";
import { grantCache } from "./middlewares/grant-cache";
import { setPgLog } from "./runtime/pg-process";
import { lockDataDir, type DataDirLock } from "./runtime/datadir-lock";

/** Logged at the start of a node that found NeDB documents in its DATA_DIR with DOCUMENT_STORE unset. */
export const NEDB_DATA_DIR_NOTICE = (dataDir: string) =>
	`DATA_DIR ${dataDir} holds NeDB documents: starting on NeDB (one process, every document in memory). PostgreSQL is the default store: ` +
	`stop the platform, run \`npm run migrate-store\` (DATA_DIR=${dataDir}) to copy them into it, then start again ` +
	`(docs/production.md, "From NeDB to PostgreSQL"); DOCUMENT_STORE=nedb keeps NeDB without this notice.`;

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
	// A DATA_DIR given here (tests, tools) chooses the default store by its own files, as DATA_DIR does in readConfig.
	if (overrides.dataDir !== undefined && overrides.documentStore === undefined) Object.assign(cfg, documentStoreFor(cfg.dataDir));
	// One process per DATA_DIR with an embedded store: a second one exits here, having touched nothing (runtime/datadir-lock.ts).
	lock ??= await lockDataDir(cfg);
	try {
		return await start(cfg, lock);
	} catch (err) {
		await lock?.release();
		throw err;
	}
}

async function start(cfg: PlatformConfig, lock: DataDirLock | undefined): Promise<Platform> {
	// DATA_DIR holds password hashes, keys and the audit store: its owner's only (every file in it is 0600).
	privateDataDir(cfg.dataDir);
	// The embedded cache keeps its login failure counters across a restart (DATA_DIR/cache.json, mode 0600).
	const kv = sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
	if (kv instanceof MemoryKeyValue) kv.persistTo(path.join(cfg.dataDir, "cache.json"));
	// The grant index is per process; a new platform in the same process (tests) must not see the last one's.
	grantCache.invalidate();
	// Signals are the caller's (start.ts stops in order); moleculer's own handler would stop the broker in parallel.
	const broker = new ServiceBroker({ ...brokerOptions(cfg), skipProcessEventRegistration: true });
	bindConfig(broker, cfg);
	const log = broker.getLogger("platform");
	if (cfg.nedbDataDir && !cfg.mongoUri) log.warn(NEDB_DATA_DIR_NOTICE(cfg.dataDir));
	setPgLog(broker.getLogger("postgres"));
	const all = { ...serviceCatalog(cfg), ...workerCatalog() };
	const names = cfg.services ?? Object.keys(all);
	for (const n of names) {
		if (!all[n]) throw new Error(`unknown service ${n}; known: ${Object.keys(all).join(", ")}`);
		broker.createService(all[n]);
	}
	// The nodes that append to the outbox feed the production event stream (events/relay.ts).
	if (cfg.eventStream && cfg.eventStream !== "outbox" && names.some((n) => DOMAINS.some((d) => d.name === n))) broker.createService(relayService());
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
		 * events in progress are handled (Moleculer stops the services in parallel, so a worker's handler would
		 * otherwise call a service or store that is already stopping); the services and workers stop; then the event
		 * streams close (the embedded PostgreSQL stops with its last user: there, on the PostgreSQL document store, the
		 * outbox and the groups' positions); then the cache; then DATA_DIR is given back.
		 */
		async stop() {
			// Streams that end only when the gateway lets them (live cursors) end first: the gateway's stop waits for
			// the requests it holds (middlewares/node-stopping.ts does the same for a bare broker.stop()).
			await broker.broadcastLocal(NODE_STOPPING);
			const api = broker.getLocalService("api");
			if (api) {
				await broker.destroyService(api);
				log.info("stop: gateway closed (no new requests)");
			}
			await stopConsumers(cfg);
			log.info("stop: event consumers stopped");
			await broker.stop();
			log.info("stop: services and workers stopped");
			await closeSharedStreams(cfg);
			log.info("stop: event streams closed");
			await closeSharedKeyValues();
			await lock?.release();
			log.info("stop: cache closed; stopped");
		},
	};
}

/**
 * watcher (4040): keeps the critical entities every node caches in sync from the change stream (consumer group
 * `watcher`, at least once), so a change is effective on every node even when the write path's own broadcast was
 * lost (a node down at that moment, a write made by a platform process, a purge):
 *
 * - auth/grants, and context/configs with key RBAC → `authority.changed` (every node reloads its grant index);
 * - identity/sessions deleted → the session's blacklist key is (re)set and `auth.session.revoked` broadcast;
 * - identity/users whose roles, groups, username or state changed → `identity.user.changed` `{ ids }` (every node reads
 *   the user again before deciding its tokens);
 * - auth/apts deleted → the same for the APT's own session, plus `auth.apt.revoked` (still deleted only: an APT
 *   restored since is left alone);
 * - domain/clients changed → `domain.client.changed` `{ id, op }` (for caches of client records);
 * - context/configs with key CQRS → `context.cqrs.changed` `{ eids }` (dispatchers drop their copy).
 *
 * Every action is idempotent, so a redelivered event only repeats it.
 *
 * It also monitors sagas: every SAGA_SCAN_MS, and at once when it starts (a saga that expired while the platform
 * was down), it asks essential to compensate the sagas still AWAITING past their `expires_at`
 * (`essential.sagas.expire`). Several watchers may scan at once: each saga is compensated under its lease and by a
 * conditional state change, so once.
 */
import { APT_REVOCATION_ACTION, AUTHORITY_CHANGED, CQRS_CHANGED, SAGAS_EXPIRE_ACTION } from "../lib/contracts";
import type { Service, ServiceBroker } from "moleculer";
import type { ChangeEvent } from "../lib/change-event";
import { configOf } from "../runtime/config";
import { actionAvailable } from "../runtime/health";
import { sharedKeyValue, type KeyValue } from "../runtime/kv";
import type { Doc } from "../lib/types";
import type { OutboxRecord } from "../events/outbox";
import { announceRevocation, blacklistSession, USER_CHANGED, userStateChanged } from "../authority/authenticate";
import { WORKER_PORTS } from "./index";
import { workerService } from "./worker";

export const CLIENT_CHANGED = "domain.client.changed";
/** Grant changes come in bursts (seeding, bulk writes): one reload broadcast per burst is enough. */
const AUTHORITY_COALESCE_MS = 50;
/** Period of the saga expiry scan: an expired saga is compensated within this plus the compensation itself. */
export const SAGA_SCAN_MS = Number(process.env.SAGA_SCAN_MS) || 2000;

const docsOf = (ev: ChangeEvent): Doc[] => [ev.before, ev.after].filter((d): d is Doc => !!d);

export interface WatchDeps {
	broker: ServiceBroker;
	kv: KeyValue;
	/** Broadcasts `authority.changed` (coalesced by the service). */
	authorityChanged(): void;
}

/** What one change means for the caches; throws (the stream retries) when a step fails. */
export async function watch(d: WatchDeps, rec: OutboxRecord): Promise<void> {
	const ev = rec.event;
	if (!ev) return;
	switch (ev.topic) {
		case "auth.grants":
			d.authorityChanged();
			return;
		case "context.configs": {
			const docs = docsOf(ev);
			if (docs.some((x) => x.key === "RBAC")) d.authorityChanged();
			const eids = [...new Set(docs.filter((x) => x.key === "CQRS" && x.eid !== undefined).map((x) => String(x.eid)))];
			if (eids.length) d.broker.broadcast(CQRS_CHANGED, { eids });
			return;
		}
		case "identity.sessions":
			if (ev.op === "d") await revokeSession(d, ev.id);
			return;
		case "identity.users":
			if (userStateChanged(ev.op, ev.before, ev.after)) d.broker.broadcast(USER_CHANGED, { ids: [ev.id] });
			return;
		case "auth.apts": {
			if (ev.op !== "d") return;
			const apt = (await d.broker.call(APT_REVOCATION_ACTION, { id: ev.id })) as { session?: string; hash?: string; live: boolean } | null;
			// Destroyed: the delete itself revoked it (nothing left to read); restored since: it must keep working.
			if (!apt || apt.live) return;
			if (apt.session) await blacklistSession(d.kv, apt.session);
			await announceRevocation(d.broker, { sessions: apt.session ? [apt.session] : [], hashes: apt.hash ? [apt.hash] : [] });
			return;
		}
		case "domain.clients":
			d.broker.broadcast(CLIENT_CHANGED, { id: ev.id, op: ev.op });
			return;
		// essential/sagas: expiry is a periodic scan (below), not a change event: nothing happens when a ttl runs out.
		default:
			return;
	}
}

async function revokeSession(d: WatchDeps, session: string): Promise<void> {
	await blacklistSession(d.kv, session);
	await announceRevocation(d.broker, { sessions: [session] });
}

/** The watcher's `this` (lib/service.ts). */
type Watcher = Service & {
	deps: WatchDeps;
	stopping?: boolean;
	authorityTimer?: NodeJS.Timeout;
	sagaTimer?: NodeJS.Timeout;
	/** The expiry scan under way. */
	sagaScan?: Promise<unknown>;
	scanSagas(): Promise<unknown> | undefined;
	flushAuthority(): void;
};

export default workerService<Watcher>(
	{
		name: "watcher",
		port: WORKER_PORTS.watcher,
		async onChange(this: Watcher, rec: OutboxRecord) {
			await watch(this.deps, rec);
		},
		checks(this: Watcher) {
			return { cache: () => this.deps.kv.ping() };
		},
	},
	{
		created(this: Watcher) {
			const cfg = configOf(this.broker);
			this.deps = {
				broker: this.broker,
				kv: sharedKeyValue(cfg.redisUrl, cfg.redisPrefix),
				authorityChanged: () => {
					// While stopping (the consumer may still finish a record), at once: no timer outlives the service.
					if (this.stopping) return this.flushAuthority();
					if (this.authorityTimer) return;
					this.authorityTimer = setTimeout(() => this.flushAuthority(), AUTHORITY_COALESCE_MS);
				},
			} satisfies WatchDeps;
		},
		started(this: Watcher) {
			// At start at once (once essential answers), then periodically.
			this.sagaTimer = setInterval(() => this.scanSagas(), SAGA_SCAN_MS);
			this.sagaTimer.unref?.();
			this.broker
				.waitForServices("essential", 60_000)
				.then(() => this.scanSagas())
				.catch(() => undefined);
		},
		async stopped(this: Watcher) {
			this.stopping = true;
			clearInterval(this.sagaTimer);
			if (this.authorityTimer) this.flushAuthority();
			await this.sagaScan?.catch(() => undefined);
		},
		methods: {
			/** One expiry scan at a time per watcher; a failure (essential not up yet) waits for the next tick. */
			scanSagas(this: Watcher): Promise<unknown> | undefined {
				if (this.stopping || this.sagaScan) return this.sagaScan;
				// Not asked before some node offers it: Moleculer logs a warning for every call to an unknown action (a start
				// where the watcher's first tick comes before the essential service registered).
				if (!actionAvailable(this.broker, SAGAS_EXPIRE_ACTION)) return Promise.resolve();
				this.sagaScan = this.broker
					.call(SAGAS_EXPIRE_ACTION, { limit: 100 }, { meta: {} })
					.catch((err: unknown) => this.logger.debug("saga expiry scan failed", err))
					.finally(() => (this.sagaScan = undefined));
				return this.sagaScan;
			},
			flushAuthority(this: Watcher) {
				clearTimeout(this.authorityTimer);
				this.authorityTimer = undefined;
				this.broker.broadcast(AUTHORITY_CHANGED, {});
			},
			/** The handler the stream calls, for tests and replays. */
			handleChange(this: Watcher, rec: OutboxRecord) {
				return watch(this.deps, rec);
			},
		},
	},
);

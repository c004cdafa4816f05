/**
 * Each node keeps the grant index in memory (every stored grant plus the RBAC expansion), loaded from the auth
 * service's snapshot and dropped whenever any node broadcasts `authority.changed`: a grant or role change is
 * effective on every node at once, and a decision costs no network round trip.
 */
import type { Context } from "moleculer";
import { GrantIndex, type Grant } from "../lib/grants";
import { onAuthorityChanged } from "../engine/authority-hook";

export const SNAPSHOT_ACTION = "auth.grants.snapshot";

export class GrantCache {
	private index?: GrantIndex;
	private loading?: Promise<GrantIndex>;
	private version = 0;

	invalidate(): void {
		this.version++;
		this.index = undefined;
		this.loading = undefined;
	}

	/** The loaded index, if any: the request path takes it without a promise and a turn of the microtask queue. */
	loaded(): GrantIndex | undefined {
		return this.index;
	}

	/** `caller`: any context (or broker) able to call the auth service's snapshot. */
	async get(ctx: Pick<Context, "call">): Promise<GrantIndex> {
		if (this.index) return this.index;
		if (!this.loading) {
			const v = this.version;
			const p = (ctx.call(SNAPSHOT_ACTION, {}) as Promise<{ grants: Grant[] }>).then((s) => {
				const idx = new GrantIndex(s.grants);
				// A change that arrived while loading makes this snapshot stale: keep it for this caller only.
				if (v === this.version) this.index = idx;
				return idx;
			});
			p.catch(() => undefined).finally(() => {
				if (this.loading === p) this.loading = undefined;
			});
			this.loading = p;
		}
		return this.loading;
	}
}

/** One cache per process: every domain service of the node shares it. */
export const grantCache = new GrantCache();
// The engine's domain services receive AUTHORITY_CHANGED and pass it on here (the engine does not import this file).
onAuthorityChanged(() => grantCache.invalidate());

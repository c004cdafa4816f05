/**
 * What the engine does when any node broadcasts AUTHORITY_CHANGED (lib/contracts.ts): it runs the functions the
 * layer above registered here. The authority layer registers its grant cache's invalidation when it is loaded
 * (authority/grant-cache.ts), so the engine knows no file above it: every domain service's handler drops this
 * node's grant index, as before, without importing the cache.
 */
const hooks = new Set<() => void>();

/** Registers `fn` to run on every AUTHORITY_CHANGED a domain service of this node receives. */
export function onAuthorityChanged(fn: () => void): void {
	hooks.add(fn);
}

/** Runs every registered function (the engine's AUTHORITY_CHANGED handler). */
export function authorityChanged(): void {
	for (const fn of hooks) fn();
}

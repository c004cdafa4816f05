/**
 * A gateway keeps no cached "live" session answer during its first seconds (authority/authenticate.ts,
 * DISCOVERY_GRACE_MS): the other nodes may not know it yet, so a revocation they announce would not reach it. During
 * the grace every request asks the shared blacklist and the durable session; afterwards one answer per 30 s is kept.
 * A revocation announced with announceRevocation waits until each gateway has applied it.
 */
import type { ServiceBroker } from "moleculer";
import { announceRevocation, Authenticator, blacklistSession } from "../../authority/authenticate";
import { Aes } from "../../lib/crypto";
import { MemoryKeyValue } from "../../runtime/kv";
import { JwtKeys } from "../../lib/tokens";

const SECRET = "x".repeat(48);

/** A gateway on a broker with a transporter (peers that may not know it yet), or alone (`transit` undefined). */
function setup({ clustered = true } = {}) {
	const kv = new MemoryKeyValue();
	const live = { calls: 0, live: true };
	const call = async (action: string, params: { id: string }) =>
		action === "identity.sessions.live" ? (live.calls++, { live: live.live }) : action === "identity.users.byId" ? { id: params.id, subjects: [], status: "ACTIVE" } : null;
	const broker = { call, transit: clustered ? {} : undefined } as unknown as ServiceBroker;
	const jwt = new JwtKeys(SECRET);
	const auth = new Authenticator({ jwt, aes: new Aes(SECRET), kv, broker, trustProxy: false });
	const token = jwt.sign({ type: "access", uid: "u1", cid: "c1", session: "s1", scope: "read:content" } as never, 900);
	const req = { headers: { authorization: `Bearer ${token}` } };
	return { kv, live, auth, req };
}

afterEach(() => jest.useRealTimers());

test("during the first 10 s every request asks the durable session; a revocation in the shared blacklist holds at once", async () => {
	const { kv, live, auth, req } = setup();
	await auth.authenticate(req);
	await auth.authenticate(req);
	expect(live.calls).toBe(2);
	// Revoked by a node that does not know this gateway yet: no broadcast reaches it, the blacklist does.
	await blacklistSession(kv, "s1");
	await expect(auth.authenticate(req)).rejects.toMatchObject({ code: 401, message: "session is revoked" });
});

test("a node without a transporter has no grace: one live answer is kept from the start, a revocation applies at once", async () => {
	const { live, auth, req } = setup({ clustered: false });
	await auth.authenticate(req);
	await auth.authenticate(req);
	expect(live.calls).toBe(1);
	// Every revocation in one process goes through this node's own handler (the REST logout, the watcher).
	auth.sessionRevoked("s1");
	await expect(auth.authenticate(req)).rejects.toMatchObject({ code: 401, message: "session is revoked" });
});

test("after the grace, one live answer is kept for 30 s (the broadcast then revokes it)", async () => {
	jest.useFakeTimers({ now: Date.now(), doNotFake: ["nextTick", "setImmediate", "queueMicrotask"] });
	const { live, auth, req } = setup();
	jest.setSystemTime(Date.now() + 11_000);
	await auth.authenticate(req);
	await auth.authenticate(req);
	expect(live.calls).toBe(1);
	auth.sessionRevoked("s1");
	await expect(auth.authenticate(req)).rejects.toMatchObject({ code: 401, message: "session is revoked" });
});

test("announceRevocation broadcasts and waits for every available gateway's api.revoke, bounded and never failing", async () => {
	const calls: Array<{ action: string; params: unknown; nodeID?: string }> = [];
	const broadcasts: Array<[string, unknown]> = [];
	let slowDone = false;
	const broker = {
		broadcast: (event: string, payload: unknown) => broadcasts.push([event, payload]),
		registry: {
			getActionEndpoints: () => ({
				endpoints: [
					{ id: "gw-a", isAvailable: true },
					{ id: "gw-b", isAvailable: true },
					{ id: "gw-gone", isAvailable: false },
				],
			}),
		},
		call: async (action: string, params: unknown, opts: { nodeID?: string }) => {
			calls.push({ action, params, nodeID: opts.nodeID });
			if (opts.nodeID === "gw-b") {
				await new Promise((r) => setTimeout(r, 50));
				slowDone = true;
				throw new Error("gateway b failed");
			}
			return true;
		},
	} as unknown as ServiceBroker;
	await announceRevocation(broker, { sessions: ["s1"], hashes: ["h1"] });
	expect(slowDone).toBe(true);
	expect(broadcasts).toEqual([
		["auth.session.revoked", { session: "s1" }],
		["auth.apt.revoked", { hash: "h1" }],
	]);
	expect(calls).toEqual([
		{ action: "api.revoke", params: { sessions: ["s1"], hashes: ["h1"] }, nodeID: "gw-a" },
		{ action: "api.revoke", params: { sessions: ["s1"], hashes: ["h1"] }, nodeID: "gw-b" },
	]);
});

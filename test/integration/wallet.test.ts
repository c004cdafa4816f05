/**
 * A new user gets a wallet (spec: "Creating a user triggers internal events ... automatic wallet creation"):
 * financial/wallets, owned by the user, from the durable change stream; exactly one per user whatever the
 * redelivery (replayed record, concurrent deliveries, a whole replay after a restart).
 */
import { randomBytes } from "crypto";
import { bootPlatform, dataDirHoldingOutbox, type TestPlatform } from "../helpers/platform";
import { createUser, tokenOf } from "../helpers/auth";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { createStore, type StoredDoc } from "../../stores";
import { WALLET_GROUP, walletIdOf } from "../../services/financial.service";
import { waitForValue } from "../helpers/wait";

function financialOf(p: TestPlatform): any {
	return p.broker.getLocalService("financial");
}

async function walletsOf(p: TestPlatform, user: string): Promise<StoredDoc[]> {
	return financialOf(p).collectionStore("wallets").find({ query: { user } });
}

async function userCreation(p: TestPlatform, id: string): Promise<OutboxRecord> {
	const all = await sharedOutbox(p.cfg).readFrom(0, 100_000);
	const rec = all.find((r) => r.event.topic === "identity.users" && r.event.op === "c" && r.event.id === id);
	if (!rec) throw new Error(`no creation record for user ${id}`);
	return rec;
}

describe("wallets of new users", () => {
	let p: TestPlatform;
	let root: string;

	beforeAll(async () => {
		// Every change event stays readable (the tests read the outbox from its start; consumers passing prune it).
		p = await bootPlatform({ dataDir: dataDirHoldingOutbox() });
		root = await p.rootToken();
	}, 60_000);

	afterAll(async () => {
		await p?.cleanup();
	});

	test("a wallet appears for a user created through HTTP: owned by the user, USD, balance 0", async () => {
		const username = `w-${randomBytes(4).toString("hex")}`;
		const password = `pw-${randomBytes(9).toString("hex")}`;
		const user = await createUser(p.http, root, { username, password });
		// The root client sees it through the client zone (the wallet's clients are the user document's).
		const q = `/financial/wallets?query=${encodeURIComponent(JSON.stringify({ user: user.id }))}&zone=client`;
		const list = await waitForValue("the wallet", async () => {
			const r = await p.http("GET", q, { token: root });
			expect(r.status).toBe(200);
			return r.body.total === 1 ? r.body : null;
		});
		expect(list.items[0]).toMatchObject({
			id: walletIdOf(user.id),
			user: user.id,
			currency: "USD",
			balance: 0,
			owner: user.id,
			clients: [p.root.client_id],
			deleted_at: null,
			version: "1.0.0",
		});

		// The user, granted read on wallets, finds it in its own zone.
		const g = await p.http("POST", "/auth/grants", { token: root, body: { subject: `${user.id}@${p.root.domain}`, action: "read", object: "financial:wallets" } });
		expect(g.status).toBe(200);
		const t = await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password });
		const mine = await p.http("GET", "/financial/wallets", { token: t.access_token });
		expect(mine.status).toBe(200);
		expect(mine.body).toMatchObject({ total: 1, items: [{ user: user.id, owner: user.id }] });

		// Like any write, the wallet has its change event.
		const all = await sharedOutbox(p.cfg).readFrom(0, 100_000);
		const events = all.filter((r) => r.event.topic === "financial.wallets" && r.event.after?.user === user.id);
		expect(events.map((r) => r.event.op)).toEqual(["c"]);
		expect(events[0].owner).toBe(user.id);
	});

	test("the root user seeded at the first start has one too", async () => {
		const w = await waitForValue("root's wallet", async () => ((await walletsOf(p, p.root.user_id)).length ? walletsOf(p, p.root.user_id) : null));
		expect(w).toHaveLength(1);
	});

	test("exactly one wallet per user when the creation is delivered again, also concurrently", async () => {
		const user = await createUser(p.http, root, { username: `r-${randomBytes(4).toString("hex")}`, password: "pw-redelivered-1" });
		await waitForValue("the wallet", async () => (await walletsOf(p, user.id)).length === 1);
		const rec = await userCreation(p, user.id);
		const svc = financialOf(p);
		await Promise.all([svc.ensureWallet(rec), svc.ensureWallet(rec), svc.ensureWallet(rec)]);
		await svc.ensureWallet(rec);
		expect(await walletsOf(p, user.id)).toHaveLength(1);
		// Concurrent first deliveries of a creation nobody handled yet: the wallet id follows from the user id.
		const fresh: OutboxRecord = { ...rec, event: { ...rec.event, id: "aaaaaaaaaaaaaaaaaaaaaaaa" }, clients: [p.root.client_id] };
		await Promise.all([svc.ensureWallet(fresh), svc.ensureWallet(fresh), svc.ensureWallet(fresh)]);
		expect(await walletsOf(p, "aaaaaaaaaaaaaaaaaaaaaaaa")).toHaveLength(1);
		// Other records are not wallet business.
		expect(await svc.ensureWallet({ ...rec, event: { ...rec.event, op: "u" } })).toBeNull();
		expect(await svc.ensureWallet({ ...rec, event: { ...rec.event, topic: "identity.profiles" } })).toBeNull();
	});

	test("a full replay of the stream after a restart creates no second wallet", async () => {
		const users = [];
		for (let i = 0; i < 3; i++) users.push(await createUser(p.http, root, { username: `re-${i}-${randomBytes(4).toString("hex")}`, password: `pw-replay-${i}` }));
		for (const u of users) await waitForValue("the wallet", async () => (await walletsOf(p, u.id)).length === 1);
		const dataDir = p.dataDir;
		const cfg = p.cfg;
		await p.stop();
		// Forget where the wallet consumer stopped: the next start delivers every user creation again.
		const offsets = createStore(cfg, "_stream_offsets");
		await offsets.connect();
		expect(await offsets.removeMany({ id: WALLET_GROUP })).toBe(1);
		await offsets.disconnect();
		p = await bootPlatform({ dataDir });
		const svc = financialOf(p);
		const all = await sharedOutbox(p.cfg).readFrom(0, 100_000);
		const last = all[all.length - 1].seq;
		await waitForValue("the replay", async () => svc.walletConsumer.position() >= last, 20_000);
		const wallets: StoredDoc[] = await svc.collectionStore("wallets").find({ query: {} });
		const perUser = new Map<string, number>();
		for (const w of wallets) perUser.set(w.user as string, (perUser.get(w.user as string) ?? 0) + 1);
		for (const u of [...users, { id: p.root.user_id }]) expect(perUser.get(u.id)).toBe(1);
		expect([...perUser.values()].every((n) => n === 1)).toBe(true);
	}, 60_000);
});

/**
 * The outbox's grace (OUTBOX_GRACE_MS, default 60 s), on both document stores: a change event every consumer group
 * has passed stays that long for the readers that tail the outbox without being a group (each node's search index,
 * live cursors); one that stalls less than the grace misses nothing. Without a grace it goes at the next pass.
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { sharedOutbox } from "../../events/outbox";
import { sleep } from "../helpers/wait";

jest.setTimeout(120_000);

describe("outbox grace", () => {
	let t: Tenancy;

	beforeAll(async () => {
		t = await bootTenancy();
	}, 120_000);

	afterAll(async () => {
		await t?.cleanup();
	});

	const eventsOf = async (id: string) => (await sharedOutbox(t.p.cfg).readFrom(0, 100_000)).filter((r) => r.event.id === id);

	test("an event every group has passed stays for the grace, whatever the pruner's passes; without a grace it goes", async () => {
		const id = (await ok(t.as(t.a.admin.token, "POST", "/content/notes", { title: "graced" }), "note")).data.id as string;
		const [rec] = await eventsOf(id);
		expect(rec.event).toMatchObject({ op: "c", topic: "content.notes" });
		// The platform's own pruner runs a second after the groups move: the event is still there after it.
		await sleep(2500);
		expect((await eventsOf(id)).map((r) => r.seq)).toEqual([rec.seq]);
		// A pass told that every group passed it: kept within the grace, removed without one.
		const outbox = sharedOutbox(t.p.cfg);
		await outbox.prune(rec.seq, 168);
		expect((await eventsOf(id)).map((r) => r.seq)).toEqual([rec.seq]);
		expect(await outbox.prune(rec.seq, 168, 0)).toBeGreaterThanOrEqual(1);
		expect(await eventsOf(id)).toEqual([]);
		// Another tenant's later write is not past the position given: it stays.
		const other = (await ok(t.as(t.b.admin.token, "POST", "/content/notes", { title: "later" }), "note")).data.id as string;
		await outbox.prune(rec.seq, 168, 0);
		expect(await eventsOf(other)).toHaveLength(1);
	});
});

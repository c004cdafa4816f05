/**
 * The caller's list and count through the API, on both document stores (issue 22 item 4: on PostgreSQL the owner zone
 * is read from its own index, stores/pg.query.ts ownerSplit): for users of tenants a and b, every zone form,
 * the common sorts (ties in `created_at` broken by `id`) and windows, the page and the exact total are those of the
 * documents the test wrote, kept or soft-deleted, as the zones define them (spec: Zones); another tenant's ids in the
 * query select nothing beyond the caller's zones; a hostile zone or pagination is a 400.
 */
import { bootTenancy, ok, type Doc, type Tenancy, type TenantUser } from "../helpers/tenants";

jest.setTimeout(240_000);

const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));

describe("the caller's list of its zones", () => {
	let t: Tenancy;
	/** Every note written, as the API returned it, and whether it was soft-deleted since. */
	const notes: Array<Doc & { gone?: boolean }> = [];

	const create = async (u: TenantUser, items: Doc[]) => {
		const r = await ok(t.as(u.token, "POST", "/content/notes/bulk", { items }), "bulk create");
		notes.push(...r.items);
		return r.items as Doc[];
	};

	beforeAll(async () => {
		t = await bootTenancy();
		const { a, b } = t;
		// Bulk creates stamp their documents within the same few milliseconds: ties in `created_at`.
		const mine = await create(
			a.member,
			Array.from({ length: 30 }, (_, i) => ({ title: `mine ${i}` })),
		);
		for (let i = 0; i < 3; i++) mine.push(...(await create(a.member, [{ title: `single ${i}` }])));
		await create(a.member, [{ title: "mine, shared with myself", shares: [a.member.id] }]);
		const fromAdmin = await create(a.admin, [
			...Array.from({ length: 6 }, (_, i) => ({ title: `shared ${i}`, shares: [a.member.id, a.limited.id] })),
			...Array.from({ length: 4 }, (_, i) => ({ title: `admin's ${i}` })),
		]);
		// Tenant b: the same forms (a share across tenants is refused at the write).
		await create(
			b.member,
			Array.from({ length: 5 }, (_, i) => ({ title: `b shares ${i}`, shares: [b.admin.id] })),
		);
		await create(b.admin, [{ title: "b's own" }, { title: "b's shared", shares: [b.member.id, b.limited.id] }]);
		for (const d of [mine[2], mine[11], mine[31], fromAdmin[1]]) {
			const owner = [a.member, a.admin].find((u) => u.id === d.owner)!;
			await ok(t.as(owner.token, "DELETE", `/content/notes/${d.id}`), "delete");
			notes.find((n) => n.id === d.id)!.gone = true;
		}
	}, 240_000);
	afterAll(() => t?.cleanup());

	/** What the spec's zones select for `me`, sorted as the stores sort (ties by id in the first key's direction). */
	function expected(me: string, zones: string[], sort: Record<string, 1 | -1> | undefined, match: (d: Doc) => boolean = () => true): string[] {
		const s = sort ?? { id: 1 };
		const [[first, dir]] = Object.entries(s);
		const docs = notes.filter((d) => !d.gone && match(d) && ((zones.includes("own") && d.owner === me) || (zones.includes("share") && (d.shares ?? []).includes(me))));
		const cmp = (x: string, y: string) => (x < y ? -1 : x > y ? 1 : 0);
		docs.sort((x, y) => (first === "id" ? 0 : dir * cmp(x[first], y[first])) || dir * cmp(x.id, y.id));
		return docs.map((d) => d.id);
	}

	const ZONES: Array<[string | undefined, string[]]> = [
		[undefined, ["own", "share"]],
		["own", ["own"]],
		["share", ["share"]],
		["own,share", ["own", "share"]],
		["share,own", ["own", "share"]],
	];
	const SORTS: Array<Record<string, 1 | -1> | undefined> = [{ created_at: -1 }, { created_at: 1 }, undefined, { id: -1 }];
	const WINDOWS = [
		{ skip: 0, limit: 20 },
		{ skip: 7, limit: 5 },
		{ skip: 0, limit: 100 },
		{ skip: 40, limit: 10 },
	];

	test("page and exact total of every zone form, sort and window, for users of both tenants", async () => {
		expect(notes.filter((d) => d.owner === t.a.member.id && !d.gone).length).toBe(31);
		// Ties: several notes of one bulk share a creation time.
		expect(new Set(notes.map((d) => d.created_at)).size).toBeLessThan(notes.length);
		// `limited` holds no grant: its notes shared with it stay unreadable (403, the spec's message).
		for (const u of [t.a.limited, t.b.limited]) {
			expect(expected(u.id, ["share"], undefined).length).toBeGreaterThan(0);
			const r = await t.as(u.token, "GET", `/content/notes?zone=share`);
			expect({ status: r.status, body: r.body }).toEqual({ status: 403, body: { statusCode: 403, error: "Forbidden", message: "no grant for read on content:notes" } });
		}
		for (const u of [t.a.member, t.a.admin, t.b.member, t.b.admin])
			for (const [zone, zones] of ZONES)
				for (const sort of SORTS) {
					const want = expected(u.id, zones, sort);
					for (const w of WINDOWS) {
						const path = `/content/notes?query=${q({})}&pagination=${q({ ...w, ...(sort ? { sort } : {}) })}${zone ? `&zone=${zone}` : ""}`;
						const got = await ok(t.as(u.token, "GET", path), path);
						expect({ path, ids: got.items.map((d: Doc) => d.id), total: got.total }).toEqual({ path, ids: want.slice(w.skip, w.skip + w.limit), total: want.length });
					}
					const count = await ok(t.as(u.token, "GET", `/content/notes/count?query=${q({})}${zone ? `&zone=${zone}` : ""}`), "count");
					expect(count.total).toBe(want.length);
				}
	});

	test("another tenant's or user's ids in the query select nothing outside the caller's zones", async () => {
		const { a, b } = t;
		// Tenant b's owners select nothing for a.member; a.admin's, only what it shared with a.member.
		for (const other of [b.member, b.admin, a.admin]) {
			const got = await ok(t.as(a.member.token, "GET", `/content/notes?query=${q({ owner: other.id })}&pagination=${q({ limit: 100, sort: { created_at: -1 } })}`), "by owner");
			const want = expected(a.member.id, ["own", "share"], { created_at: -1 }, (d) => d.owner === other.id);
			expect({ other: other.username, ids: got.items.map((d: Doc) => d.id), total: got.total }).toEqual({ other: other.username, ids: want, total: want.length });
		}
		expect(expected(a.member.id, ["own", "share"], undefined, (d) => d.owner === a.admin.id).length).toBe(5);
		expect(expected(a.member.id, ["own", "share"], undefined, (d) => d.owner === b.member.id)).toEqual([]);
		// Own zone with somebody else's owner: empty, not an error.
		const none = await ok(t.as(a.member.token, "GET", `/content/notes?query=${q({ owner: b.member.id })}&zone=own`), "own, other owner");
		expect({ items: none.items, total: none.total }).toEqual({ items: [], total: 0 });
		// Hostile input: a 400 with the spec's message, never a 500.
		for (const [path, message] of [
			[`/content/notes?zone=own,everyone`, "unknown zone everyone"],
			[`/content/notes?query=${q({ owner: { $where: "1" } })}`, undefined],
			[`/content/notes?pagination=${q({ limit: 20, sort: { created_at: 2 } })}`, 'pagination.sort.created_at must be 1, -1, "asc" or "desc"'],
		] as Array<[string, string | undefined]>) {
			const r = await t.as(a.member.token, "GET", path);
			expect({ path, status: r.status }).toEqual({ path, status: 400 });
			if (message) expect(r.body).toEqual({ statusCode: 400, error: "Bad Request", message });
		}
	});
});

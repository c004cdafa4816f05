/**
 * A document table's schema is checked once per version of the sources, not at every start: connect marks a table
 * whose indexes and triggers it has made (`platform-docs:v3 schema:<hash>`), and a later connect that finds that mark
 * reads one catalog row and sends no DDL; a table with another mark, or none, takes the whole path again and gets
 * back what is missing (stores/pg.store.ts `schema`).
 */
import { Client } from "pg";
import { PgStore } from "../../stores";
import { recordStatements, storeDatabase } from "../helpers/pg";

jest.setTimeout(60_000);

let admin: Client | undefined;
// Before storeDatabase's: jest runs afterAll hooks in the order they are declared, and the database is dropped in its.
afterAll(async () => admin?.end());
const { up, url, cfg } = storeDatabase("pgstore-mark-");
beforeAll(async () => {
	if (!up()) return;
	admin = new Client({ connectionString: url() });
	await admin.connect();
});

const markOf = async (table: string) => (await admin!.query(`select obj_description(to_regclass($1), 'pg_class') as c`, [table])).rows[0].c as string | null;
const indexesOf = async (table: string) =>
	(await admin!.query<{ n: string }>(`select indexname as n from pg_indexes where tablename = $1 order by 1`, [table.slice(1, -1)])).rows.map((r) => r.n);
const triggersOf = async (table: string) =>
	Number((await admin!.query(`select count(*) as n from pg_trigger where tgrelid = to_regclass($1) and not tgisinternal`, [table])).rows[0].n);

/** The statements one connect sends (the store's own connection), its store kept connected until `fn` returns. */
async function connectRecording(name: string, extra: string[] = []): Promise<string[]> {
	const rec = recordStatements(admin!);
	const store = new PgStore(cfg(), name, extra);
	try {
		await store.connect();
	} finally {
		rec.restore();
	}
	await store.disconnect();
	return rec.statements;
}

const DDL = /^\s*(create|drop|alter|comment)\b/i;

test("a marked table costs one catalog read; an unmarked one, or one marked by other sources, is made whole again", async () => {
	if (!up()) return;
	const table = `"docs/notes/marked"`;
	const first = await connectRecording("notes/marked", ["title"]);
	expect(first.filter((s) => DDL.test(s)).length).toBeGreaterThan(8);
	expect(await markOf(table)).toMatch(/^platform-docs:v3 schema:[0-9a-f]{16}$/);
	const indexes = await indexesOf(table);
	expect(indexes.length).toBe(9);
	expect(await triggersOf(table)).toBe(4);

	// Marked by these sources: no transaction, no lock, no DDL.
	const again = await connectRecording("notes/marked", ["title"]);
	expect(again.filter((s) => DDL.test(s) || /advisory|^begin/i.test(s))).toEqual([]);
	expect(again.filter((s) => /obj_description/.test(s))).toHaveLength(1);

	// An index and the triggers lost, and the mark of an earlier version: the next connect makes them again.
	await admin!.query(`drop index "${indexes.find((n) => n.endsWith("_owner_id"))}"`);
	await admin!.query(`drop trigger platform_docs_insert on ${table}`);
	await admin!.query(`comment on table ${table} is 'platform-docs:v3'`);
	await connectRecording("notes/marked", ["title"]);
	expect(await indexesOf(table)).toEqual(indexes);
	expect(await triggersOf(table)).toBe(4);
	expect(await markOf(table)).toMatch(/^platform-docs:v3 schema:[0-9a-f]{16}$/);

	// Another schema (an index more, as a later version would ask): its own mark, and the index made.
	const mark = await markOf(table);
	await connectRecording("notes/marked", ["title", "priority"]);
	expect(await markOf(table)).not.toBe(mark);
	expect((await indexesOf(table)).length).toBe(10);
});

test("the platform's own stores carry the mark too, without the cache's triggers", async () => {
	if (!up()) return;
	await connectRecording("_marked_own");
	expect(await markOf(`"docs/_marked_own"`)).toMatch(/^platform-docs:v3 schema:[0-9a-f]{16}$/);
	expect(await triggersOf(`"docs/_marked_own"`)).toBe(0);
	const again = await connectRecording("_marked_own");
	expect(again.filter((s) => DDL.test(s))).toEqual([]);
});

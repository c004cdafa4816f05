/**
 * moleculer-web resolves a request's alias by trying every alias's regular expression in order (several hundred
 * here: every collection's routes). The platform's paths all start with a literal segment (`/content/notes/...`), so
 * the aliases are indexed by it: a request only tries, in the same order, the aliases whose first segment is its own
 * or is not literal. Same answer as the linear scan, a few regular expressions instead of hundreds.
 */

/** What the index needs of a moleculer-web alias. */
export interface IndexedAlias {
	fullPath: string;
	method: string;
	isMethod(method: string): boolean;
	match(url: string): false | Record<string, unknown>;
}

/** path-to-regexp's special characters (3.x): a first segment holding none of them matches only itself. */
const LITERAL_FIRST = /^\/([A-Za-z0-9_.~-]*)(?=\/|$)/;

/** The literal first segment of an alias path, lower-cased (aliases match case-insensitively), or null. */
function literalFirst(fullPath: string): string | null {
	const m = LITERAL_FIRST.exec(fullPath);
	return m ? m[1].toLowerCase() : null;
}

/** The request path's first segment, lower-cased, as the aliases were indexed. */
function firstSegment(url: string): string {
	const end = url.indexOf("/", 1);
	return (end === -1 ? url.slice(1) : url.slice(1, end)).toLowerCase();
}

export class AliasIndex<A extends IndexedAlias> {
	private readonly bySegment = new Map<string, A[]>();
	private readonly wild: A[];

	constructor(readonly aliases: readonly A[]) {
		const firsts = aliases.map((a) => literalFirst(a.fullPath));
		this.wild = aliases.filter((_, i) => firsts[i] === null);
		for (const seg of new Set(firsts))
			if (seg !== null)
				this.bySegment.set(
					seg,
					aliases.filter((_, i) => firsts[i] === null || firsts[i] === seg),
				);
	}

	resolve(url: string, method: string): { alias: A; params: Record<string, unknown> } | false {
		// A request target that is not a path (`*`, absolute form) matches no literal segment: only the others are tried.
		const list = url.startsWith("/") ? (this.bySegment.get(firstSegment(url)) ?? this.wild) : this.wild;
		for (const alias of list) {
			if (!alias.isMethod(method)) continue;
			const params = alias.match(url);
			if (params) return { alias, params };
		}
		return false;
	}
}

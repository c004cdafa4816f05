/** content: the standard collection pattern on every collection of the domain (catalog/domains/content.ts), and post search. */
import type { ServiceSchema } from "moleculer";
import { content } from "../catalog/domains/content";
import { collectionMixin } from "../engine/collection.mixin";
import { searchableMixin, searchHandler } from "./search/searchable";

const POSTS = content.collections.find((c) => c.name === "posts")!;

// The collection mixin last: its `started` (stores) runs before the search index's.
const ContentService: ServiceSchema = {
	name: "content",
	mixins: [searchableMixin(content, ["posts"]), collectionMixin(content, { posts: { specials: { search: searchHandler(POSTS) } } })],
};

export default ContentService;

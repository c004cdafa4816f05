/** content: the standard collection pattern on every collection of the domain (catalog/domains/content.ts). */
import type { ServiceSchema } from "moleculer";
import { content } from "../catalog/domains/content";
import { collectionMixin } from "../mixins/collection.mixin";

const ContentService: ServiceSchema = { name: "content", mixins: [collectionMixin(content)] };

export default ContentService;

//! Titles, article bodies and profiles for seeded data: Chinese and English text of realistic,
//! varied length, as the rich-text editor would have produced it.
//!
//! Bodies are HTML the sanitiser leaves exactly as it is (paragraphs, headings, lists, quotes,
//! code, emphasis; no characters it would escape), so seeding can skip the sanitiser, and the
//! generator keeps the body's plain text as it goes, so the abstract comes from
//! [`abstract_of_text`] without parsing the HTML back. The seed's tests check both against
//! [`sanitize_html`](crate::article::model::sanitize_html) and
//! [`abstract_of`](crate::article::model::abstract_of).

use super::random::Rng;
use crate::article::abstract_of_text;

/// A generated article: title, HTML body and the abstract of that body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArticleText {
    /// Plain-text title.
    pub title: String,
    /// Sanitised HTML.
    pub content: String,
    /// `abstract_of(content)`.
    pub abstract_text: String,
}

const ENGLISH_WORDS: &[&str] = &[
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "for",
    "on",
    "with",
    "that",
    "this",
    "it",
    "we",
    "you",
    "our",
    "when",
    "how",
    "why",
    "what",
    "every",
    "one",
    "more",
    "less",
    "than",
    "not",
    "only",
    "just",
    "still",
    "then",
    "after",
    "before",
    "under",
    "over",
    "into",
    "without",
    "system",
    "service",
    "database",
    "cache",
    "index",
    "query",
    "request",
    "response",
    "latency",
    "throughput",
    "memory",
    "thread",
    "runtime",
    "lock",
    "queue",
    "stream",
    "event",
    "consumer",
    "producer",
    "cluster",
    "node",
    "replica",
    "leader",
    "shard",
    "partition",
    "snapshot",
    "log",
    "table",
    "row",
    "column",
    "page",
    "batch",
    "transaction",
    "commit",
    "rollback",
    "schema",
    "migration",
    "deployment",
    "release",
    "build",
    "test",
    "benchmark",
    "profile",
    "trace",
    "metric",
    "alert",
    "dashboard",
    "incident",
    "outage",
    "failure",
    "retry",
    "timeout",
    "backoff",
    "budget",
    "design",
    "pattern",
    "interface",
    "module",
    "crate",
    "library",
    "function",
    "closure",
    "future",
    "task",
    "channel",
    "buffer",
    "allocation",
    "pointer",
    "reference",
    "lifetime",
    "borrow",
    "compiler",
    "error",
    "type",
    "trait",
    "generic",
    "macro",
    "article",
    "reader",
    "writer",
    "author",
    "comment",
    "feed",
    "follower",
    "ranking",
    "score",
    "community",
    "team",
    "engineer",
    "product",
    "user",
    "customer",
    "feature",
    "roadmap",
    "simple",
    "fast",
    "slow",
    "safe",
    "small",
    "large",
    "hot",
    "cold",
    "stale",
    "fresh",
    "durable",
    "consistent",
    "eventual",
    "strong",
    "weak",
    "cheap",
    "expensive",
    "careful",
    "honest",
    "clear",
    "hidden",
    "obvious",
    "subtle",
    "real",
    "practical",
    "modern",
    "classic",
    "measure",
    "build",
    "ship",
    "read",
    "write",
    "scale",
    "split",
    "merge",
    "cache",
    "store",
    "serve",
    "count",
    "rank",
    "learn",
    "explain",
    "compare",
    "avoid",
    "prefer",
    "choose",
    "keep",
    "drop",
    "grow",
    "shrink",
    "wait",
    "poll",
    "claim",
    "release",
    "recover",
    "replay",
    "rebuild",
    "lessons",
    "notes",
    "thoughts",
    "ideas",
    "numbers",
    "tradeoffs",
    "mistakes",
    "questions",
    "morning",
    "weekend",
    "year",
    "week",
    "day",
    "hour",
    "minute",
    "second",
    "time",
    "place",
];

const CHINESE_WORDS: &[&str] = &[
    "我们",
    "系统",
    "服务",
    "数据库",
    "缓存",
    "索引",
    "查询",
    "请求",
    "响应",
    "延迟",
    "吞吐量",
    "内存",
    "线程",
    "协程",
    "锁",
    "队列",
    "消息",
    "事件",
    "消费者",
    "生产者",
    "集群",
    "节点",
    "副本",
    "主从",
    "分片",
    "分区",
    "快照",
    "日志",
    "表",
    "字段",
    "分页",
    "批量",
    "事务",
    "提交",
    "回滚",
    "迁移",
    "部署",
    "发布",
    "构建",
    "测试",
    "压测",
    "性能",
    "优化",
    "监控",
    "告警",
    "链路",
    "追踪",
    "故障",
    "重试",
    "超时",
    "降级",
    "限流",
    "熔断",
    "设计",
    "模式",
    "接口",
    "模块",
    "函数",
    "文章",
    "读者",
    "作者",
    "评论",
    "关注",
    "粉丝",
    "点赞",
    "收藏",
    "阅读",
    "热榜",
    "排行",
    "社区",
    "团队",
    "工程师",
    "产品",
    "用户",
    "需求",
    "功能",
    "架构",
    "微服务",
    "分布式",
    "高可用",
    "一致性",
    "最终一致",
    "幂等",
    "并发",
    "异步",
    "同步",
    "调度",
    "任务",
    "定时",
    "抢占",
    "续约",
    "简单",
    "快速",
    "稳定",
    "安全",
    "轻量",
    "复杂",
    "实际",
    "清晰",
    "可靠",
    "高效",
    "灵活",
    "其实",
    "但是",
    "所以",
    "因为",
    "如果",
    "然后",
    "最后",
    "首先",
    "同时",
    "另外",
    "因此",
    "可以",
    "需要",
    "应该",
    "能够",
    "已经",
    "还是",
    "就是",
    "不是",
    "没有",
    "非常",
    "比较",
    "理解",
    "实现",
    "分析",
    "解决",
    "处理",
    "支持",
    "保证",
    "避免",
    "减少",
    "提高",
    "选择",
    "问题",
    "方案",
    "思路",
    "经验",
    "总结",
    "笔记",
    "原理",
    "细节",
    "场景",
    "代价",
    "收益",
    "今天",
    "这次",
    "一个",
    "这个",
    "那个",
    "每次",
    "第一",
    "一些",
    "很多",
    "整个",
    "部分",
];

const ENGLISH_NAMES: &[&str] = &[
    "Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory",
    "Niaj", "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Walter", "Wendy", "Yuki",
    "Zoe", "Lin", "Ken", "Mia", "Noah", "Liam", "Emma", "Ava", "Leo",
];

const ENGLISH_SURNAMES: &[&str] = &[
    "Smith", "Chen", "Wang", "Garcia", "Müller", "Kim", "Nguyen", "Rossi", "Silva", "Tanaka",
    "Ivanova", "Okafor", "Novak", "Larsen", "Dubois", "Cohen", "Patel", "Moreau", "Brown", "Lee",
];

const CHINESE_SURNAMES: &[&str] = &[
    "王", "李", "张", "刘", "陈", "杨", "黄", "赵", "吴", "周", "徐", "孙", "马", "朱", "胡", "郭",
    "何", "高", "林", "罗", "郑", "梁", "谢", "宋", "唐", "许", "韩", "冯", "邓", "曹",
];

const CHINESE_GIVEN: &[&str] = &[
    "伟", "芳", "娜", "敏", "静", "丽", "强", "磊", "军", "洋", "勇", "艳", "杰", "娟", "涛", "明",
    "超", "秀", "霞", "平", "刚", "桂", "英", "华", "文", "斌", "宇", "浩", "凯", "晨",
];

const CODE_LINES: &[&str] = &[
    "let rows = store.scan(since).await?;",
    "SELECT id, title FROM published_articles WHERE ctime >= $1 ORDER BY ctime, id LIMIT 1000;",
    "redis-cli ZREVRANGE ranking 0 99 WITHSCORES",
    "for item in batch { heap.push(item.score(), item.id); }",
    "go func() { defer wg.Done(); worker.Run(ctx) }()",
    "wrk -t2 -c64 -d10s http://127.0.0.1:8080/ranking/top",
    "cargo bench -p webook --bench kernels",
    "if err != nil { return fmt.Errorf(\"claim: %w\", err) }",
];

/// Whether a generated item is Chinese or English.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// Simplified Chinese.
    Chinese,
    /// English.
    English,
}

impl Language {
    /// Chinese three times in five (the course's community writes mostly Chinese).
    pub fn draw(rng: &mut Rng) -> Self {
        if rng.chance(0.6) {
            Self::Chinese
        } else {
            Self::English
        }
    }
}

/// How much plain text to keep for the abstract: comfortably more than its 128 characters.
const ABSTRACT_SOURCE_BYTES: usize = 1024;

/// The body being written, with its plain text (the start of it, for the abstract).
struct Body {
    html: String,
    text: String,
}

impl Body {
    /// Appends `fragment` to the HTML and, while the abstract still needs it, to the text.
    fn push(&mut self, fragment: &str, is_text: bool) {
        self.html.push_str(fragment);
        if is_text && self.text.len() < ABSTRACT_SOURCE_BYTES {
            self.text.push_str(fragment);
        }
    }

    /// A line break between block elements: whitespace in the text, so blocks do not run
    /// together in the abstract.
    fn newline(&mut self) {
        self.push("\n", true);
    }
}

/// One sentence in `language`: 6–18 English words or 4–12 Chinese ones, sometimes with a
/// comma and an emphasised word.
fn sentence(rng: &mut Rng, language: Language, body: &mut Body) {
    let (words, comma, stop): (u64, &str, &str) = match language {
        Language::English => (rng.between(6, 18), ",", "."),
        Language::Chinese => (rng.between(4, 12), "，", "。"),
    };
    let comma_at = if rng.chance(0.4) {
        rng.between(2, words.max(3) - 1)
    } else {
        u64::MAX
    };
    for i in 0..words {
        let word = match language {
            Language::English => rng.pick(ENGLISH_WORDS),
            Language::Chinese => rng.pick(CHINESE_WORDS),
        };
        if i > 0 && language == Language::English {
            body.push(" ", true);
        }
        let (open, close) = match rng.below(40) {
            0 => ("<strong>", "</strong>"),
            1 => ("<em>", "</em>"),
            2 if language == Language::English => ("<code>", "</code>"),
            _ => ("", ""),
        };
        body.push(open, false);
        if i == 0 && language == Language::English {
            body.push(&capitalized(word), true);
        } else {
            body.push(word, true);
        }
        body.push(close, false);
        if i == comma_at {
            body.push(comma, true);
        }
    }
    body.push(stop, true);
}

/// `word` with its first letter in upper case.
fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// A paragraph of 1–6 sentences.
fn paragraph(rng: &mut Rng, language: Language, body: &mut Body) {
    body.push("<p>", false);
    for i in 0..rng.between(1, 6) {
        if i > 0 && language == Language::English {
            body.push(" ", true);
        }
        sentence(rng, language, body);
    }
    body.push("</p>", false);
}

/// A title: 3–10 English words in title case, or 4–12 Chinese characters' worth of words,
/// sometimes with a question mark or a bracketed tag.
fn title(rng: &mut Rng, language: Language) -> String {
    let mut title = String::new();
    if rng.chance(0.1) {
        title.push_str(match language {
            Language::English => "[Notes] ",
            Language::Chinese => "【笔记】",
        });
    }
    match language {
        Language::English => {
            for i in 0..rng.between(3, 10) {
                if i > 0 {
                    title.push(' ');
                }
                title.push_str(&capitalized(rng.pick(ENGLISH_WORDS)));
            }
        }
        Language::Chinese => {
            for _ in 0..rng.between(2, 6) {
                title.push_str(rng.pick(CHINESE_WORDS));
            }
        }
    }
    if rng.chance(0.15) {
        title.push_str(match language {
            Language::English => "?",
            Language::Chinese => "？",
        });
    }
    title
}

/// An article in `language`: mostly a few paragraphs (a short post), sometimes long-form with
/// headings, lists, quotes and code — lengths from about a hundred bytes to tens of kilobytes.
pub fn article(rng: &mut Rng, language: Language) -> ArticleText {
    let title = title(rng, language);
    let long_form = rng.chance(0.03);
    let blocks = if long_form {
        rng.between(20, 60)
    } else {
        // 1–12, short ones most often (5 on average).
        1 + (rng.unit() * rng.unit() * 12.0) as u64
    };
    let mut body = Body {
        html: String::with_capacity(blocks as usize * 300),
        text: String::with_capacity(ABSTRACT_SOURCE_BYTES + 256),
    };
    for block in 0..blocks {
        if block > 0 {
            body.newline();
        }
        let kind = if block == 0 { 0 } else { rng.below(20) };
        match kind {
            1 if long_form || blocks > 3 => {
                body.push("<h2>", false);
                body.push(&self::title(rng, language), true);
                body.push("</h2>", false);
            }
            2 => {
                body.push("<ul>", false);
                for item in 0..rng.between(2, 5) {
                    if item > 0 {
                        body.newline();
                    }
                    body.push("<li>", false);
                    sentence(rng, language, &mut body);
                    body.push("</li>", false);
                }
                body.push("</ul>", false);
            }
            3 => {
                body.push("<blockquote>", false);
                sentence(rng, language, &mut body);
                body.push("</blockquote>", false);
            }
            4 => {
                body.push("<pre><code>", false);
                for line in 0..rng.between(1, 4) {
                    if line > 0 {
                        body.newline();
                    }
                    body.push(&escape_code(rng.pick(CODE_LINES)), true);
                }
                body.push("</code></pre>", false);
            }
            _ => paragraph(rng, language, &mut body),
        }
    }
    let abstract_text = abstract_of_text(&unescape_code(&body.text));
    ArticleText {
        title,
        content: body.html,
        abstract_text,
    }
}

/// Code lines contain `<`, `>`, `&` and quotes; HTML text escapes the first three as the
/// sanitiser writes them.
fn escape_code(line: &str) -> String {
    line.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The text of escaped code, as a reader sees it (what the abstract is made of).
fn unescape_code(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// A nickname: a Chinese name, an English name, or a handle; empty for one user in ten (the
/// API then shows a generated display name).
pub fn nickname(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => String::new(),
        1..=5 => {
            let mut name = rng.pick(CHINESE_SURNAMES).to_owned();
            for _ in 0..rng.between(1, 2) {
                name.push_str(rng.pick(CHINESE_GIVEN));
            }
            name
        }
        6..=8 => format!("{} {}", rng.pick(ENGLISH_NAMES), rng.pick(ENGLISH_SURNAMES)),
        _ => format!("{}_{}", rng.pick(ENGLISH_WORDS), rng.below(10_000)),
    }
}

/// A comment: one to three sentences in one language, plain text.
pub fn comment(rng: &mut Rng) -> String {
    let language = Language::draw(rng);
    let mut body = Body {
        html: String::new(),
        text: String::new(),
    };
    for n in 0..rng.between(1, 3) {
        if n > 0 && language == Language::English {
            body.push(" ", true);
        }
        sentence(rng, language, &mut body);
    }
    body.text
}

/// A one-sentence "about me" for three users in ten, empty for the rest.
pub fn about_me(rng: &mut Rng) -> String {
    if !rng.chance(0.3) {
        return String::new();
    }
    let language = Language::draw(rng);
    let mut body = Body {
        html: String::new(),
        text: String::new(),
    };
    sentence(rng, language, &mut body);
    body.text
}

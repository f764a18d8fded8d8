//! Plain closings (written first): what an assistant writes as its last message before the
//! user's next turn, a sentence or two that close on a question or a statement, generated from
//! a grammar: the assistant turns a decision about the user's reply can be tested behind.
//!
//! Written blind: the phrasings come from how assistants (GPT, Claude, Gemini, Llama, in agent
//! products) actually talk, not from the decision this set will test nor from any list of its
//! own, which was not read. After its first measurement the reading of the assistant's turn
//! was revised on it (`docs/BENCHMARKS.md` has both figures): it is held out no more.
//!
//! Two [`Situation`]s:
//! - **ask**: the assistant has understood the request and, before doing it, asks to go on; or
//!   reports a failure and asks whether to retry; or proposes the next step of the same task.
//! - **handback**: the assistant has finished (or answered) and hands the conversation back,
//!   reporting it is done and/or inviting a new request.
//!
//! [`english`] composes a turn from slot lists: an action ([`ACTIONS`] or a [`VERBS`] word on a
//! neutral [`TASKS`] phrase), a preamble, an optional caveat, and a closing that is a question
//! or a statement (ask); or a done word, a summary and an invitation, any of them left out
//! (handback). A few shapes add what a model's markdown looks like (bold, a short list line).
//! Every closing list has question and statement forms, so many turns end without a '?'.
//! [`other_language`] picks a complete turn written in another language. The caller's `choose`
//! makes every pick, so a seeded caller draws the same turns on every run.

use super::Situation;

/// A neutral thing a request is about, and whether it takes "are" and "have".
struct Task {
    name: &'static str,
    plural: bool,
}

/// What the task phrases are: none belongs to one tool's domain.
const TASKS: &[Task] = &[
    Task {
        name: "the report",
        plural: false,
    },
    Task {
        name: "the changes",
        plural: true,
    },
    Task {
        name: "the file",
        plural: false,
    },
    Task {
        name: "the request",
        plural: false,
    },
    Task {
        name: "the deployment",
        plural: false,
    },
    Task {
        name: "the message",
        plural: false,
    },
    Task {
        name: "the update",
        plural: false,
    },
    Task {
        name: "the draft",
        plural: false,
    },
    Task {
        name: "the order",
        plural: false,
    },
    Task {
        name: "the migration",
        plural: false,
    },
    Task {
        name: "the summary",
        plural: false,
    },
    Task {
        name: "the updates",
        plural: true,
    },
    Task {
        name: "the edits",
        plural: true,
    },
    Task {
        name: "the task",
        plural: false,
    },
    Task {
        name: "the job",
        plural: false,
    },
    Task {
        name: "the document",
        plural: false,
    },
];

/// Verbs (bare form) that fit every task phrase.
const VERBS: &[&str] = &[
    "process",
    "finalize",
    "get started on",
    "start on",
    "take care of",
    "prepare",
    "complete",
    "handle",
    "work on",
    "wrap up",
    "move forward with",
];

/// Whole actions, verb and object that go together.
const ACTIONS: &[&str] = &[
    "apply the changes",
    "send the message",
    "start the deployment",
    "update the file",
    "generate the report",
    "submit the request",
    "publish the draft",
    "save the document",
    "push the update",
    "run the migration",
    "place the order",
    "make those edits",
    "create the summary",
    "delete the old file",
    "roll out the update",
    "overwrite the existing file",
];

/// What the assistant says it is about to do; `{action}` is filled.
const PREAMBLES: &[&str] = &[
    "I'll {action}.",
    "I'm going to {action}.",
    "I'm about to {action}.",
    "I'm ready to {action}.",
    "Next, I'll {action}.",
    "Got it. I'll {action}.",
    "Understood. I'll {action}.",
    "Sure, I can {action}.",
    "Okay, I'll {action}.",
    "Here's the plan: {action}.",
    "I've got everything I need to {action}.",
    "Everything is in place to {action}.",
    "To do this, I'll {action}.",
    "Before I {action}, I want to check with you.",
    "I understand you want me to {action}.",
    "Sounds good. I'm set to {action}.",
    "Alright, the next step is to {action}.",
    "I've reviewed everything and I'm ready to {action}.",
];

/// Said between a preamble and the question, now and then.
const CAVEATS: &[&str] = &[
    "This can't be undone.",
    "This may take a few minutes.",
    "It should only take a moment.",
    "This will replace the current version.",
    "Nothing has been changed yet.",
    "I haven't made any changes yet.",
    "You can review everything afterwards.",
    "Just want to double-check first.",
    "Heads up: this affects the live version.",
];

/// Asks to go on, as questions.
const ASK_QUESTIONS: &[&str] = &[
    "Shall I go ahead?",
    "Should I proceed?",
    "Would you like me to proceed?",
    "Do you want me to continue?",
    "Want me to go ahead?",
    "Is that okay?",
    "Is it okay to proceed?",
    "OK to proceed?",
    "Can I go ahead?",
    "Go ahead?",
    "Proceed?",
    "Confirm?",
    "Sound good?",
    "Does that work for you?",
    "Should I start now?",
    "Ready for me to start?",
    "Would you like me to continue?",
    "Shall I continue?",
    "Do I have your go-ahead?",
    "Is this what you want?",
    "Does that look right before I start?",
    "Want me to do that now?",
];

/// Asks to go on, as statements and imperatives.
const ASK_STATEMENTS: &[&str] = &[
    "Let me know and I'll start.",
    "Let me know if I should proceed.",
    "Let me know if you'd like me to go ahead.",
    "Please confirm and I'll proceed.",
    "Please confirm before I continue.",
    "Please confirm.",
    "Just say the word.",
    "Say the word and I'll get started.",
    "Give me the go-ahead and I'll start.",
    "I'll wait for your confirmation.",
    "Waiting for your go-ahead.",
    "Awaiting your confirmation.",
    "Ready when you are.",
    "Reply \"yes\" to continue.",
    "Confirm and I'll take it from there.",
    "Tell me when to start.",
    "I'll hold off until you confirm.",
    "Once you confirm, I'll get started.",
    "Just confirm and I'll run it.",
    "Let me know how you'd like to proceed.",
];

/// Asks about one action, as questions; `{action}` is filled.
const ACTION_QUESTIONS: &[&str] = &[
    "Would you like me to {action}?",
    "Should I {action} now?",
    "Shall I {action}?",
    "Do you want me to {action}?",
    "Want me to {action}?",
    "Can I go ahead and {action}?",
    "OK to {action}?",
    "Should I go ahead and {action}?",
    "Are you sure you want me to {action}?",
    "Ready for me to {action}?",
    "Just to confirm: you want me to {action}, right?",
    "Shall I {action} now?",
];

/// Asks about one action, as statements; `{action}` is filled.
const ACTION_STATEMENTS: &[&str] = &[
    "Let me know if I should {action}.",
    "Please confirm and I'll {action}.",
    "Confirm and I'll {action}.",
    "Say the word and I'll {action}.",
    "Reply \"yes\" and I'll {action}.",
    "Please confirm that you'd like me to {action}.",
    "Give me the go-ahead and I'll {action}.",
    "Once you confirm, I'll {action}.",
    "Let me know when you're ready for me to {action}.",
    "I'll {action} as soon as you confirm.",
    "Just confirm and I'll {action}.",
];

/// What went wrong, before asking to retry; `{task}` is filled.
const FAILURES: &[&str] = &[
    "The call timed out.",
    "That didn't go through.",
    "The request failed.",
    "I ran into an error while working on {task}.",
    "Something went wrong with {task}.",
    "I couldn't finish {task}: the service returned an error.",
    "The connection dropped before {task} finished.",
    "It looks like that failed.",
    "Unfortunately, {task} didn't complete.",
    "I hit a timeout on {task}.",
    "The server returned a 500 error.",
    "That attempt was rejected.",
    "Hmm, that didn't work.",
    "Sorry, the operation failed partway through.",
    "I wasn't able to complete {task}.",
    "The service is temporarily unavailable.",
];

/// Asks whether to retry, as questions.
const RETRY_QUESTIONS: &[&str] = &[
    "Want me to retry?",
    "Should I try again?",
    "Shall I try again?",
    "Would you like me to try again?",
    "Should I give it another go?",
    "Want me to try once more?",
    "Retry?",
    "Do you want me to retry it?",
    "Shall I retry now?",
    "Should I try a different approach?",
    "Would you like me to retry in a moment?",
];

/// Asks whether to retry, as statements.
const RETRY_STATEMENTS: &[&str] = &[
    "Let me know if you'd like me to retry.",
    "I can try again if you want.",
    "Say the word and I'll retry.",
    "Tell me if I should try again.",
    "I can retry whenever you're ready.",
    "Let me know if I should give it another shot.",
    "I'm happy to try again.",
    "Just let me know and I'll run it again.",
    "I can retry, or we can try something else.",
];

/// Proposes the next step of the same task; `{action}` is filled.
const NEXT_STEPS: &[&str] = &[
    "Next, I can {action}.",
    "The next step would be to {action}.",
    "I could also {action}.",
    "If you'd like, I can {action} next.",
    "From here, I can {action}.",
    "One more step: I can {action}.",
    "I can {action} next if you want.",
    "The next logical step is to {action}.",
    "Now I can {action}.",
];

/// Asks whether to take the proposed step, as questions.
const NEXT_QUESTIONS: &[&str] = &[
    "Want me to do that?",
    "Should I go ahead?",
    "Would you like that?",
    "Shall I?",
    "Should I do that now?",
    "Want me to continue?",
    "Sound good?",
    "Would that help?",
];

/// Asks whether to take the proposed step, as statements.
const NEXT_STATEMENTS: &[&str] = &[
    "Just say the word.",
    "Let me know if you want that.",
    "Let me know if you'd like me to continue.",
    "Say the word and I'll do it.",
    "Happy to do that if you want.",
    "Let me know.",
    "Just confirm and I'll continue.",
];

/// Said before a short ask with nothing else, now and then.
const READY: &[&str] = &[
    "Ready.",
    "Ready to go.",
    "All set up.",
    "Everything's prepared.",
    "Got it.",
    "Understood.",
    "Okay.",
    "Sure.",
    "Ready to send.",
    "Ready to start.",
    "All ready.",
    "Everything looks good.",
];

/// Says the task is done, alone.
const DONE: &[&str] = &[
    "Done.",
    "Done!",
    "All set.",
    "All set!",
    "All done.",
    "All done!",
    "That's done.",
    "Finished.",
    "Complete.",
    "Success!",
    "There you go.",
    "Here you go.",
    "Okay, that's taken care of.",
    "Great, that worked.",
    "That's all taken care of.",
    "Perfect, it's done.",
    "Done and dusted.",
    "✅ Done.",
    "**Done.**",
    "Finished!",
];

/// Past participles for "{task} has been …"; fit every task phrase.
const PARTICIPLES: &[&str] = &[
    "completed",
    "processed",
    "finalized",
    "handled",
    "taken care of",
    "prepared",
    "wrapped up",
];

/// What was done; `{task}`, `{Task}`, `{is}`, `{has}` and `{done}` are filled.
const SUMMARIES: &[&str] = &[
    "I've {done} {task}.",
    "{Task} {has} been {done}.",
    "{Task} {is} ready.",
    "{Task} {is} complete.",
    "{Task} went through successfully.",
    "I've {done} {task} as requested.",
    "I've finished {task}.",
    "I've wrapped up {task}.",
    "{Task} {is} all done.",
    "{Task} {has} been {done} successfully.",
    "Everything went smoothly: {task} {is} finished.",
    "{Task} {is} ready for you.",
    "Here are the results.",
    "Here's what I found.",
    "The email has been sent.",
    "Your changes have been saved.",
    "The file has been uploaded.",
    "The message was sent.",
    "Everything ran without errors.",
    "That should answer your question.",
    "I hope that clears things up.",
    "That covers everything you asked about.",
];

/// Invites a new request, as questions.
const INVITE_QUESTIONS: &[&str] = &[
    "Is there anything else?",
    "Is there anything else I can help you with?",
    "Anything else?",
    "Anything else you need?",
    "What would you like to do next?",
    "What's next?",
    "What else can I do for you?",
    "Would you like me to do anything else?",
    "Need anything else?",
    "Is there anything else you'd like me to look at?",
    "How else can I help?",
    "Do you need anything else?",
    "Can I help with anything else?",
    "Anything else I can do?",
    "What would you like to work on next?",
    "Is there something else you'd like to do?",
    "Anything else on your list?",
];

/// Invites a new request, as statements.
const INVITE_STATEMENTS: &[&str] = &[
    "Let me know if you need anything else.",
    "Let me know if there's anything else I can do.",
    "Feel free to ask if you need anything else.",
    "Just let me know what you'd like next.",
    "I'm here if you need anything else.",
    "Happy to help with anything else.",
    "Hope this helps!",
    "Let me know if you have any questions.",
    "Let me know if you'd like any changes.",
    "Tell me what you'd like to do next.",
    "Feel free to send your next request.",
    "Just ask if there's anything more.",
    "Let me know what else you need.",
    "Happy to help further if needed.",
    "I'm ready for the next task.",
];

/// Complete asks in other languages, as a model writes them.
const OTHER_ASKS: &[&str] = &[
    "Je vais envoyer le message. Voulez-vous que je continue ?",
    "Tout est prêt. Dois-je procéder ?",
    "Confirmez-moi et je lance l'opération.",
    "Voy a aplicar los cambios. ¿Quieres que continúe?",
    "La solicitud agotó el tiempo de espera. ¿Quieres que lo intente de nuevo?",
    "Avísame y empiezo.",
    "Ich werde die Änderungen übernehmen. Soll ich fortfahren?",
    "Bitte bestätige kurz, dann lege ich los.",
    "Vou gerar o relatório. Posso prosseguir?",
    "Me avise e eu começo.",
    "Procedo con l'invio del messaggio?",
    "Fammi sapere se devo continuare.",
    "変更を適用します。続行してもよろしいですか？",
    "準備ができました。実行しますか？",
    "我将部署更新。需要我继续吗？",
    "请确认后我再开始。",
    "Я отправлю сообщение. Продолжить?",
    "Запрос завершился ошибкой. Попробовать ещё раз?",
    "변경 사항을 적용할게요. 진행할까요?",
    "Değişiklikleri uygulayacağım. Devam edeyim mi?",
    "Zal ik doorgaan met de update?",
    "Daj znać, a zacznę.",
];

/// Complete handbacks in other languages, as a model writes them.
const OTHER_HANDBACKS: &[&str] = &[
    "C'est fait. Puis-je vous aider avec autre chose ?",
    "Le rapport est prêt. N'hésitez pas si vous avez besoin d'autre chose.",
    "¡Listo! ¿Necesitas algo más?",
    "He enviado el mensaje. Avísame si necesitas algo más.",
    "Erledigt. Kann ich sonst noch etwas für dich tun?",
    "Die Datei wurde gespeichert.",
    "Pronto! Mais alguma coisa?",
    "Feito. Se precisar de mais alguma coisa, é só falar.",
    "Fatto! Posso aiutarti con qualcos'altro?",
    "Ho completato la richiesta. Fammi sapere se serve altro.",
    "完了しました。他に何かお手伝いできることはありますか？",
    "ファイルを保存しました。",
    "已完成。还有什么需要帮忙的吗？",
    "报告已生成。如有其他需要，请随时告诉我。",
    "Готово. Чем ещё могу помочь?",
    "Изменения применены.",
    "완료했습니다. 더 필요한 것이 있으신가요?",
    "메시지를 보냈습니다. 다른 요청이 있으면 말씀해 주세요.",
    "Tamamlandı. Başka bir şey ister misiniz?",
    "Klaar! Kan ik nog ergens anders mee helpen?",
    "Gotowe. Daj znać, jeśli potrzebujesz czegoś jeszcze.",
];

/// One assistant turn of `situation` in English, composed from the grammar; `choose(n)` returns
/// a number in 0..n (the caller's seeded generator).
pub fn english(situation: Situation, choose: &mut dyn FnMut(usize) -> usize) -> String {
    match situation {
        Situation::Ask => ask(choose),
        Situation::Handback => handback(choose),
    }
}

/// One assistant turn of `situation` in another language, from the lists.
pub fn other_language(situation: Situation, choose: &mut dyn FnMut(usize) -> usize) -> String {
    let from = match situation {
        Situation::Ask => OTHER_ASKS,
        Situation::Handback => OTHER_HANDBACKS,
    };
    pick(from, choose).to_owned()
}

fn below(n: usize, choose: &mut dyn FnMut(usize) -> usize) -> usize {
    if n == 0 { 0 } else { choose(n) % n }
}

fn chance(percent: usize, choose: &mut dyn FnMut(usize) -> usize) -> bool {
    below(100, choose) < percent
}

fn pick<'a>(from: &[&'a str], choose: &mut dyn FnMut(usize) -> usize) -> &'a str {
    let at = below(from.len(), choose);
    from.get(at).copied().unwrap_or_default()
}

/// A question from `questions` or a statement from `statements`, even odds.
fn closing<'a>(
    questions: &[&'a str],
    statements: &[&'a str],
    choose: &mut dyn FnMut(usize) -> usize,
) -> &'a str {
    if chance(50, choose) {
        pick(questions, choose)
    } else {
        pick(statements, choose)
    }
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn task(choose: &mut dyn FnMut(usize) -> usize) -> &'static Task {
    let at = below(TASKS.len(), choose);
    TASKS.get(at).unwrap_or(&Task {
        name: "the task",
        plural: false,
    })
}

/// An action: a whole one, or a verb on a task phrase.
fn action(choose: &mut dyn FnMut(usize) -> usize) -> String {
    if chance(45, choose) {
        pick(ACTIONS, choose).to_owned()
    } else {
        let verb = pick(VERBS, choose);
        format!("{verb} {}", task(choose).name)
    }
}

/// `template` with `{action}` and the task slots filled.
fn filled(template: &str, action: &str, task: &Task, done: &str) -> String {
    let (is, has) = if task.plural {
        ("are", "have")
    } else {
        ("is", "has")
    };
    template
        .replace("{action}", action)
        .replace("{Task}", &capitalised(task.name))
        .replace("{task}", task.name)
        .replace("{is}", is)
        .replace("{has}", has)
        .replace("{done}", done)
}

fn ask(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let act = action(choose);
    let on = task(choose);
    let fill = |template: &str| filled(template, &act, on, "");
    match below(7, choose) {
        // What it is about to do, maybe a caveat, then a request to go on.
        0 | 1 => {
            let mut parts = vec![fill(pick(PREAMBLES, choose))];
            if chance(25, choose) {
                parts.push(pick(CAVEATS, choose).to_owned());
            }
            parts.push(closing(ASK_QUESTIONS, ASK_STATEMENTS, choose).to_owned());
            parts.join(" ")
        }
        // A question or request about the action itself, maybe after a word of assent.
        2 => {
            let ending = fill(closing(ACTION_QUESTIONS, ACTION_STATEMENTS, choose));
            if chance(35, choose) {
                format!("{} {ending}", pick(READY, choose))
            } else {
                ending
            }
        }
        // A failure, then whether to retry.
        3 => {
            let failure = fill(pick(FAILURES, choose));
            let retry = closing(RETRY_QUESTIONS, RETRY_STATEMENTS, choose);
            format!("{failure} {retry}")
        }
        // The next step of the same task.
        4 => {
            if chance(25, choose) {
                format!("Would you like me to {act} next?")
            } else {
                let step = fill(pick(NEXT_STEPS, choose));
                let close = closing(NEXT_QUESTIONS, NEXT_STATEMENTS, choose);
                format!("{step} {close}")
            }
        }
        // A short ask, maybe after "Ready."
        5 => {
            let close = closing(ASK_QUESTIONS, ASK_STATEMENTS, choose);
            if chance(50, choose) {
                format!("{} {close}", pick(READY, choose))
            } else {
                close.to_owned()
            }
        }
        // Markdown: a bold plan or a short list line, then the ask.
        _ => {
            let close = closing(ASK_QUESTIONS, ASK_STATEMENTS, choose);
            match below(4, choose) {
                0 => format!("**Plan:** {act}.\n\n{close}"),
                1 => format!("Here's what I'll do:\n- {}\n\n{close}", capitalised(&act)),
                2 => format!("**Ready to {act}.** {close}"),
                _ => format!(
                    "I'll {act}.\n\n**Note:** {}\n\n{close}",
                    pick(CAVEATS, choose)
                ),
            }
        }
    }
}

fn handback(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let on = task(choose);
    let done = pick(PARTICIPLES, choose);
    let summary = filled(pick(SUMMARIES, choose), "", on, done);
    let invite = if chance(55, choose) {
        pick(INVITE_QUESTIONS, choose)
    } else {
        pick(INVITE_STATEMENTS, choose)
    };
    let word = pick(DONE, choose);
    match below(9, choose) {
        0 => word.to_owned(),
        1 | 2 => format!("{word} {invite}"),
        3 => summary,
        4 | 5 => format!("{summary} {invite}"),
        6 => format!("{word} {summary} {invite}"),
        7 => format!("{word} {summary}"),
        // Markdown: a bold summary or a short list line.
        _ => match below(3, choose) {
            0 => format!("**Summary:** {summary}\n\n{invite}"),
            1 => format!("- {}: done ✅\n\n{invite}", capitalised(on.name)),
            _ => format!("{word}\n\n- {summary}\n\n{invite}"),
        },
    }
}

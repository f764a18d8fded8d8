//! The agent-products grammar's hand-backs and its turns in other languages (split from
//! [`super`] to keep each file short; written with it, blind).

use super::*;

// ---------------------------------------------------------------------------
// Hand-back closers shared by several families. Empty means no closer.

const HANDBACK_CLOSERS: &[&str] = &[
    "Let me know if you need anything else.",
    "Let me know if you have any questions.",
    "Anything else I can help with?",
    "Is there anything else you'd like me to look at?",
    "Hope that helps!",
    "Feel free to reach out if anything looks off.",
    "Happy to help if anything else comes up.",
    "Does everything look right on your end?",
    "If you spot anything odd, just tell me.",
    "That should be everything.",
    "You're all set.",
    "Have a good one!",
    "Enjoy the rest of your day!",
    "Let me know if anything doesn't look right.",
    "Thanks for your patience on this one.",
    "Ping me if you need anything else.",
    "",
    "",
    "",
];

// ---------------------------------------------------------------------------
// Hand-back: the task is done.

const DONE_LEADS: &[&str] = &[
    "Done! {Task} finished successfully.",
    "{Task} is complete.",
    "All set: {task} went through without any issues.",
    "✅ {Task} finished in {mins}m {secs}s.",
    "Good news: {task} is finished and everything checks out.",
    "I've finished {task}.",
    "{Task} wrapped up a few minutes ago.",
    "That's done. {Task} ran cleanly.",
    "🎉 {Task} is done!",
    "{Task} has been completed in {env}.",
];

const DONE_DETAILS: &[&str] = &[
    "{total} {unit} were processed and none failed.",
    "All {total} {unit} are now in {env}.",
    "The counts match on both sides ({total} each).",
    "The results are saved in `{file}`.",
    "I've also let the {team} know.",
    "The {fail} {unit} that needed attention were fixed along the way.",
    "Nothing else needs doing on your side.",
    "It took about {mins} minutes in total.",
    "The old `{file}` is archived in case you need it.",
    "{fail} {unit} were skipped because they were already up to date.",
];

pub(super) fn hand_done(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, DONE_LEADS).to_string();
    let k = choose(3);
    for detail in pick_distinct(choose, DONE_DETAILS, k) {
        s.push(' ');
        s.push_str(detail);
    }
    close(&mut s, pick(choose, HANDBACK_CLOSERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Hand-back: a bulleted summary.

const SUMMARY_LEADS: &[&str] = &[
    "Here's a summary of what I did:",
    "Summary:",
    "**What changed**",
    "Here's where things stand:",
    "Quick recap of {task}:",
    "{Task} is done. Here's the rundown:",
    "Finished. Details below:",
];

const SUMMARY_BULLETS: &[&str] = &[
    "Processed {total} {unit} ({fail} skipped as duplicates)",
    "Updated `{file}` with the new values",
    "Removed the temporary {unit} from {env}",
    "Sent the summary to the {team}",
    "Set the next run to start {when}",
    "Archived the previous version of `{file}`",
    "Verified the totals match the source",
    "Cleared the stale entries from the queue",
    "Added a note to the ticket with the details",
    "Fixed the {fail} {unit} that failed validation",
    "Didn't touch anything outside {env}",
];

const SUMMARY_TAILS: &[&str] = &[
    "No errors along the way.",
    "Everything is live in {env}.",
    "The full log is in `{file}`.",
    "Total time: {mins} minutes.",
];

pub(super) fn hand_summary(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, SUMMARY_LEADS).to_string();
    s.push_str("\n\n");
    let bullet = pick(choose, &["- ", "* ", "• "]);
    let k = 2 + choose(4);
    for item in pick_distinct(choose, SUMMARY_BULLETS, k) {
        s.push_str(bullet);
        s.push_str(item);
        s.push('\n');
    }
    s.pop();
    if one_in(choose, 2) {
        s.push_str("\n\n");
        s.push_str(pick(choose, SUMMARY_TAILS));
    }
    close(&mut s, pick(choose, HANDBACK_CLOSERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Hand-back: a coding agent's change and test summary.

const CODE_DONE_LEADS: &[&str] = &[
    "I've made the changes.",
    "The fix is in.",
    "Done. Here's a summary of the changes:",
    "All tests are passing now.",
    "I've implemented the change to {task}.",
    "Fixed. The problem was in `{path}`.",
];

const CODE_DONE_FILES: &[&str] = &[
    "`{path}`: switched the timestamp handling to UTC",
    "`{path2}`: added a regression test for the boundary case",
    "`config.yaml`: raised the timeout from 30s to 60s",
    "`{path}`: removed the unused helper and its import",
    "`{path}`: the loop now streams the {unit} in pages of {n}",
    "`{path2}`: updated the expected output",
];

const CODE_DONE_TESTS: &[&str] = &[
    "Tests: {n} passed, 0 failed.",
    "All {n} tests pass locally.",
    "`./scripts/test.sh` passes ({n} tests).",
    "Ran the full suite: {n} passed, {fail} skipped.",
    "Lint and type checks are clean.",
    "The previously failing test now passes, and nothing else broke.",
];

const CODE_DONE_CLOSERS: &[&str] = &[
    "Let me know if you'd like any adjustments.",
    "Happy to walk through any of it.",
    "I haven't committed anything, so you can review the diff first.",
    "The changes are uncommitted and ready for your review.",
    "Want me to explain any part of it?",
    "Let me know if you run into anything.",
    "",
];

pub(super) fn hand_code(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, CODE_DONE_LEADS).to_string();
    s.push_str("\n\n");
    if one_in(choose, 3) {
        s.push_str("**Files changed:**\n");
    }
    let k = 1 + choose(3);
    for item in pick_distinct(choose, CODE_DONE_FILES, k) {
        s.push_str("- ");
        s.push_str(item);
        s.push('\n');
    }
    s.push('\n');
    s.push_str(pick(choose, CODE_DONE_TESTS));
    close(&mut s, pick(choose, CODE_DONE_CLOSERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Hand-back: an answer to the user's question.

const ANSWERS: &[&str] = &[
    "Yes, {task} runs every night at 2:00 UTC, so anything you change today will show up in tomorrow's numbers.",
    "No, {task} doesn't touch archived {unit}. It only looks at ones created in the last 30 days.",
    "The difference is that the preview only reads the {unit}, while the real run writes the changes back to {env}.",
    "It usually takes around {mins} minutes for {total} {unit}, depending on load.",
    "You'll find the output in `{file}`. Each line is one of the {unit}, sorted by date.",
    "Short answer: it's safe. {Task} only adds new {unit} and never deletes existing ones.",
    "Good question! The totals don't match because {fail} of the {unit} were refunded after the report was generated.",
    "That error means the file was already open somewhere else. Closing it and running {task} again should clear it.",
    "The {team} owns {task}, so they're the right people to ask about changing the schedule.",
    "Why is it slower on Mondays? Mostly because the weekend backlog gets processed first.",
    "Not quite. {Task} only updates {env}; production is handled separately by the {team}.",
    "Both work, but the second approach is easier to maintain because everything lives in one `{file}`.",
    "It depends on how many {unit} you have. Under a few thousand, running it in one go is fine.",
    "The short version: {task} failed because `{file}` had an empty header row. That's been fixed since.",
    "There's no hard limit on the number of {unit}, but anything over 10,000 gets split into batches automatically.",
    "**Yes.** You can rerun {task} as many times as you like; it skips {unit} that are already up to date.",
];

const ANSWER_EXTRAS: &[&str] = &[
    "So in your case you don't need to change anything.",
    "If you want to double-check, the numbers are in `{file}`.",
    "For example, with {total} {unit} it would finish in about {mins} minutes.",
    "That's also why the counts looked off last week.",
    "You can see the same thing in {env}.",
    "In practice most people never notice.",
];

const ANSWER_CLOSERS: &[&str] = &[
    "Does that answer your question?",
    "Hope that clears it up!",
    "Let me know if you want more detail on any part.",
    "Anything else you'd like to know?",
    "Happy to go deeper if that's useful.",
];

pub(super) fn hand_answer(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, ANSWERS).to_string();
    if one_in(choose, 2) {
        s.push(' ');
        s.push_str(pick(choose, ANSWER_EXTRAS));
    }
    let closer = if one_in(choose, 2) {
        pick(choose, ANSWER_CLOSERS)
    } else {
        pick(choose, HANDBACK_CLOSERS)
    };
    close(&mut s, closer, choose);
    s
}

// ---------------------------------------------------------------------------
// Hand-back: a deliverable.

const DELIVER_LEADS: &[&str] = &[
    "Here's the draft you asked for:",
    "Here's a summary you can send to the {team}:",
    "Here's a short update you can paste into the channel:",
    "Here you go:",
    "Here's the revised version:",
];

const DELIVER_CLOSERS: &[&str] = &[
    "Feel free to tweak the wording.",
    "Happy to shorten it if needed.",
    "Does this capture what you wanted?",
    "I kept it brief, but it's easy to expand.",
    "Let me know if the tone needs adjusting.",
    "",
];

pub(super) fn hand_deliverable(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = if one_in(choose, 4) {
        // A small table is a common deliverable on its own.
        format!(
            "{}\n\n| Status | Count |\n|---|---|\n| Done | {{left}} |\n| Skipped | {{n}} |\n| Total | {{total}} |",
            pick(
                choose,
                &[
                    "Here's the breakdown:",
                    "Here's the table:",
                    "Final numbers for {task}:"
                ]
            )
        )
    } else {
        format!(
            "{}\n\n{}",
            pick(choose, DELIVER_LEADS),
            pick(choose, DRAFT_BODIES)
        )
    };
    close(&mut s, pick(choose, DELIVER_CLOSERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Hand-back: a change made as asked, with a check that it suits.

const CHECK_LEADS: &[&str] = &[
    "I've updated `{file}` the way you described.",
    "I've rewritten the summary for {task} with the changes you asked for.",
    "{Task} is now set to run {when}, as you requested.",
    "I've renamed the {unit} to follow the new convention.",
    "The chart now shows {unit} per week instead of per day.",
    "I swapped the two sections and cut the intro down to two sentences.",
];

const CHECK_CLOSERS: &[&str] = &[
    "Does that work for you?",
    "Is this what you had in mind?",
    "Take a look and tell me if anything needs changing.",
    "Hopefully that's closer to what you wanted.",
    "How does that look?",
    "Let me know if it's not quite right.",
    "Does this look better?",
];

pub(super) fn hand_check(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, CHECK_LEADS).to_string();
    if one_in(choose, 3) {
        s.push(' ');
        s.push_str(pick(choose, DONE_DETAILS));
    }
    close(&mut s, pick(choose, CHECK_CLOSERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Hand-back: thanks and an invitation to come back.

const THANKS: &[&str] = &[
    "You're welcome! Glad {task} is sorted.",
    "No problem at all.",
    "Happy to help!",
    "Anytime!",
    "Glad that worked.",
    "Great, thanks for confirming.",
    "Perfect, glad we got to the bottom of it.",
];

const INVITES: &[&str] = &[
    "If anything else comes up, just let me know.",
    "Is there anything else I can do for you today?",
    "Have a great weekend!",
    "Good luck with the rest of the project!",
    "Take care.",
    "Feel free to come back anytime.",
    "Anything else on your list?",
    "",
];

pub(super) fn hand_thanks(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, THANKS).to_string();
    close(&mut s, pick(choose, INVITES), choose);
    s
}

// ---------------------------------------------------------------------------
// Hand-back: a support bot resolves the request.

const SUPPORT_DONE: &[&str] = &[
    "Your refund of {amount} has been issued to the card ending in {digits}. It usually takes 5–10 business days to show up.",
    "I've cancelled order {order}, and you'll receive a confirmation email shortly.",
    "Your appointment has been moved to {slot}. You'll get a reminder the day before.",
    "I've sent a password reset link to the email on file. It's valid for 24 hours.",
    "Ticket {ticket} is now closed since the issue has been resolved.",
    "I've applied a credit of {amount} to your account, which will show on your next invoice.",
    "Your address has been updated, and order {order} will ship to the new one.",
];

const SUPPORT_DONE_CLOSERS: &[&str] = &[
    "Is there anything else I can help you with?",
    "Thanks for contacting us, and have a great day!",
    "If you have any other questions, feel free to reply to this message.",
    "Is there anything else I can help with today?",
    "We appreciate your patience.",
    "Thanks for being a customer!",
    "",
];

pub(super) fn hand_support(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut body = pick(choose, SUPPORT_DONE).to_string();
    close(&mut body, pick(choose, SUPPORT_DONE_CLOSERS), choose);
    support_wrap(body, choose)
}

// ---------------------------------------------------------------------------
// Hand-back: an operations bot's run report.

const OPS_TAILS: &[&str] = &[
    "Next run: {when}.",
    "No action needed.",
    "cc the {team}",
    "Details in `{file}`",
    "",
];

pub(super) fn hand_ops(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = match choose(4) {
        0 => "✅ {Task} completed: {total} {unit}, {fail} retried, 0 failed. Duration {mins}m {secs}s.".to_string(),
        1 => "[{env}] {Task}: SUCCESS ({total} {unit} in {mins}m)".to_string(),
        2 => "**{Task}** finished at 02:{secs} UTC\n• Processed: {total}\n• Failed: 0\n• Skipped: {fail}".to_string(),
        _ => "{Task} ran successfully. Report: `{file}`".to_string(),
    };
    let tail = pick(choose, OPS_TAILS);
    if !tail.is_empty() {
        s.push('\n');
        s.push_str(tail);
    }
    s
}

// ---------------------------------------------------------------------------
// Hand-back: the assistant can't do it and says so, nothing pending.

const UNABLE: &[&str] = &[
    "Unfortunately I don't have access to {env}, so I can't check {task} directly. The {team} should be able to help with that.",
    "It looks like {task} was already completed by the {team} earlier today, so there's nothing left for me to do.",
    "I looked through the {unit} but couldn't find anything under that order number. It's possible it was placed with a different email address.",
    "I'm not able to change billing details from here. You can update them yourself under **Settings → Billing**.",
    "That's outside what I can do, I'm afraid. Refund exceptions have to be approved by the {team}.",
];

const UNABLE_CLOSERS: &[&str] = &[
    "Sorry I couldn't be more help!",
    "Sorry about that.",
    "Let me know if there's anything else I can do.",
    "Is there anything else I can help with?",
    "Sorry for the hassle.",
    "",
];

pub(super) fn hand_unable(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, UNABLE).to_string();
    close(&mut s, pick(choose, UNABLE_CLOSERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Hand-back: how the user can do it themselves.

const HOWTO_LEADS: &[&str] = &[
    "To rerun {task} yourself:",
    "Here's how to check it on your side:",
    "You can do it in a few steps:",
    "If you need to do this again later:",
];

const HOWTO_SEQUENCES: &[&[&str]] = &[
    &[
        "Open the dashboard and go to **Jobs**",
        "Find {task} in the list",
        "Click **Run again** and confirm",
        "Wait for the status to turn green",
    ],
    &[
        "Download `{file}` from the shared folder",
        "Open it and filter by status",
        "Anything marked \"failed\" still needs attention",
    ],
    &[
        "Go to **Settings → Schedules**",
        "Pick {task}",
        "Change the start time and save",
    ],
    &[
        "Run `./scripts/{script} --dry-run` to preview",
        "If the output looks right, run it again without `--dry-run`",
        "Check `{file}` for the results",
    ],
];

const HOWTO_TAILS: &[&str] = &["That's it!", "It takes about a minute.", ""];

pub(super) fn hand_howto(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, HOWTO_LEADS).to_string();
    s.push_str("\n\n");
    for (i, step) in pick(choose, HOWTO_SEQUENCES).iter().enumerate() {
        s.push_str(&format!("{}. {}\n", i + 1, step));
    }
    s.pop();
    let tail = pick(choose, HOWTO_TAILS);
    if !tail.is_empty() {
        s.push_str("\n\n");
        s.push_str(tail);
    }
    close(&mut s, pick(choose, HANDBACK_CLOSERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Hand-back: a status question answered (the work may still be running).

const STATUS: &[&str] = &[
    "{Task} is still running: {n} of {total} {unit} are done so far, with roughly {mins} minutes to go.",
    "{Task} is about halfway through ({n} of {total} {unit}).",
    "No, {task} hasn't started yet. It's set to start {when}.",
    "{Task} finished {mins} minutes ago; all {total} {unit} went through.",
    "Yes, {task} is on track to finish {when}.",
];

const STATUS_NOTES: &[&str] = &[
    "It'll finish on its own, so there's nothing you need to do.",
    "You'll get an email when it's done.",
    "You can watch progress in `{file}`.",
    "",
];

pub(super) fn hand_status(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, STATUS).to_string();
    let note = pick(choose, STATUS_NOTES);
    if !note.is_empty() {
        s.push(' ');
        s.push_str(note);
    }
    close(&mut s, pick(choose, HANDBACK_CLOSERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Other languages: whole turns, one list per situation.

pub(super) const ASK_OTHER: &[&str] = &[
    "He preparado la migración. ¿Quieres que la ejecute ahora o prefieres esperar a mañana?",
    "Avant de lancer l'import, pouvez-vous me confirmer que je dois écraser les données existantes ?",
    "Ich habe einen Plan für die Synchronisierung erstellt:\n\n1. Sicherung erstellen\n2. Daten abgleichen\n3. Bericht senden\n\nSoll ich so vorgehen?",
    "O reembolso de R$ 89,90 está pronto para ser processado. Posso seguir?",
    "Ci sono due opzioni: eseguire tutto stanotte oppure dividere il lavoro in lotti. Quale preferisci?",
    "De export is halverwege mislukt door een time-out. Zal ik het opnieuw proberen?",
    "Zanim usunę te rekordy, potwierdź proszę, że mam kontynuować. Tej operacji nie da się cofnąć.",
    "Первая часть отчёта готова. Продолжить со второй частью?",
    "Щоб продовжити, мені потрібен номер замовлення. Надішліть його, будь ласка.",
    "Senkronizasyonu başlatmadan önce onayınızı bekliyorum. Devam edeyim mi?",
    "هل تريد مني المتابعة في إلغاء الطلب؟ يرجى التأكيد.",
    "הכנתי את העדכון אבל עוד לא הפעלתי אותו. להמשיך?",
    "क्या मैं रिपोर्ट अभी भेज दूँ, या आप पहले इसे देखना चाहेंगे?",
    "移行の準備ができました。このまま実行してもよろしいですか？",
    "同步任务在第三步失败了（权限不足）。需要我重试吗？",
    "以下是我的計畫：先備份資料，再執行更新。您確認後我就開始。",
    "환불 처리를 진행하기 전에 확인이 필요합니다. 진행할까요?",
    "Tôi đã chuẩn bị xong bản nháp email. Bạn có muốn tôi gửi ngay không?",
    "ต้องการให้ฉันดำเนินการต่อกับรายการที่เหลืออีก 40 รายการไหมคะ",
    "Ada dua cara untuk menangani data duplikat: menghapusnya atau menggabungkannya. Mau pakai yang mana?",
    "Jag har förberett rapporten men inte skickat den än. Ska jag skicka den till ekonomiteamet?",
    "Θέλετε να συνεχίσω με την ενημέρωση των υπόλοιπων εγγραφών;",
    "Než spustím import, potřebuji vědět, do kterého prostředí ho mám nahrát.",
    "آیا می‌خواهید همین حالا همگام‌سازی را دوباره اجرا کنم؟",
    "Je, niendelee na uhamishaji wa data sasa hivi?",
];

pub(super) const HANDBACK_OTHER: &[&str] = &[
    "¡Listo! La migración terminó sin errores: se actualizaron 1.240 registros. Si necesitas algo más, aquí estoy.",
    "C'est fait : le rapport est en pièce jointe. N'hésitez pas si vous avez des questions.",
    "Die Synchronisierung ist abgeschlossen. Alle 532 Datensätze wurden übertragen, es gab keine Fehler.",
    "Pronto! Seu reembolso foi processado e deve aparecer na fatura em até 7 dias úteis. Posso ajudar em mais alguma coisa?",
    "Ho aggiornato il file di configurazione e riavviato il servizio. Ora dovrebbe funzionare tutto.",
    "Het rapport is klaar en staat in de gedeelde map. Fijne dag nog!",
    "Gotowe — eksport zakończył się pomyślnie. Plik znajdziesz w załączniku.",
    "Готово! Импорт завершён, ошибок нет. Если будут вопросы — пишите.",
    "Звіт сформовано й надіслано команді фінансів. Чи можу я ще чимось допомогти?",
    "İşlem tamamlandı. Tüm faturalar gönderildi ve herhangi bir hata oluşmadı.",
    "تم إلغاء طلبك بنجاح، وستصلك رسالة تأكيد عبر البريد الإلكتروني قريبًا. هل هناك أي شيء آخر يمكنني مساعدتك به؟",
    "סיימתי. כל הרשומות עודכנו ואין שגיאות. אם צריך עוד משהו, אני כאן.",
    "हो गया! रिपोर्ट तैयार है और आपके ईमेल पर भेज दी गई है।",
    "移行が完了しました。エラーはありませんでした。ほかに何かお手伝いできることはありますか？",
    "同步已完成，共处理 1,204 条记录，没有失败。如有其他问题，随时告诉我。",
    "報表已經更新完成，檔案放在共用資料夾裡。",
    "요청하신 환불이 완료되었습니다. 영업일 기준 3~5일 내에 반영됩니다. 감사합니다!",
    "Xong rồi! Tôi đã cập nhật tất cả các bản ghi. Bạn xem lại giúp tôi có ổn không nhé.",
    "เรียบร้อยแล้วค่ะ รายงานถูกส่งไปยังทีมการเงินแล้ว มีอะไรให้ช่วยเพิ่มเติมไหมคะ",
    "Sudah selesai. Semua data berhasil diimpor tanpa kesalahan. Semoga membantu!",
    "Klart! Importen gick igenom utan fel. Hör av dig om du behöver något mer.",
    "Η εξαγωγή ολοκληρώθηκε με επιτυχία. Το αρχείο βρίσκεται στον κοινόχρηστο φάκελο.",
    "Hotovo, všechny faktury byly odeslány. Kdybyste potřebovali cokoli dalšího, dejte vědět.",
    "گزارش آماده است و برای تیم مالی ارسال شد. اگر سؤالی داشتید در خدمتم.",
    "Nimemaliza. Ripoti imetumwa kwa timu ya fedha.",
];

#include "chatoptions.h"

#include <QCheckBox>
#include <QCryptographicHash>
#include <QDir>
#include <QFileInfo>
#include <QFontDatabase>
#include <QLabel>
#include <QPlainTextEdit>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalBlocker>
#include <QVBoxLayout>

#include <exception>

namespace stowage {

ChatOptions::ChatOptions(QWidget* parent)
    : QWidget(parent),
      m_toggle(new QCheckBox(tr("Chat: the prompt as a user message"), this)),
      m_caption(new QLabel(this)),
      m_preview(new QPlainTextEdit(this))
{
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(0, 0, 0, 0);
    v->setSpacing(2);
    m_toggle->setObjectName("chatToggle");
    m_caption->setObjectName("chatCaption");
    m_caption->setWordWrap(true);
    m_preview->setObjectName("chatPreview");
    m_preview->setReadOnly(true);
    m_preview->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_preview->setMaximumHeight(m_preview->fontMetrics().height() * 4 + 8);
    m_preview->setLineWrapMode(QPlainTextEdit::WidgetWidth);
    m_preview->setToolTip(tr("What the model reads: the prompt as one user message, rendered with the checkpoint's "
                             "chat template and the generation prompt, as transformers' apply_chat_template does"));
    v->addWidget(m_toggle);
    v->addWidget(m_caption);
    v->addWidget(m_preview);
    connect(m_toggle, &QCheckBox::toggled, this, [this](bool on) {
        // Only a user's click (or setOn) gets here: setModel blocks the signal.
        if (!m_folder.isEmpty() && m_template)
            QSettings().setValue(settingsKey(), on);
        refresh();
        emit toggled(isOn());
    });
    setModel({}, {});
}

ChatOptions::~ChatOptions() = default;

QString ChatOptions::modelName(const QString& folder)
{
    const QStringList parts = QDir::cleanPath(QDir::fromNativeSeparators(folder)).split(QLatin1Char('/'), Qt::SkipEmptyParts);
    const int n = int(parts.size());
    if (n >= 3 && parts[n - 2] == QLatin1String("snapshots") && parts[n - 3].startsWith(QLatin1String("models--")))
        return parts[n - 3].section(QStringLiteral("--"), -1); // models--org--name
    return n ? parts.back() : QString();
}

bool ChatOptions::looksInstruct(const QString& name, const QString& modelType)
{
    static const QRegularExpression instruct(
        QStringLiteral("(instruct|chat|(^|[-_.])it($|[-_.])|(^|[-_.])(sft|dpo|rlhf)($|[-_.]))"),
        QRegularExpression::CaseInsensitiveOption);
    static const QRegularExpression base(QStringLiteral("(^|[-_.])(base|pt)($|[-_.])"),
                                         QRegularExpression::CaseInsensitiveOption);
    if (instruct.match(name).hasMatch())
        return true;
    static const QStringList chatFirst{QStringLiteral("qwen3"), QStringLiteral("qwen3_moe"), QStringLiteral("gpt_oss"),
                                       QStringLiteral("deepseek_v3")};
    return chatFirst.contains(modelType) && !base.match(name).hasMatch();
}

QString ChatOptions::settingsKey() const
{
    const QString canonical = QFileInfo(m_folder).canonicalFilePath();
    const QByteArray h = QCryptographicHash::hash((canonical.isEmpty() ? m_folder : canonical).toUtf8(),
                                                  QCryptographicHash::Sha1);
    return QStringLiteral("run/chat/") + QString::fromLatin1(h.toHex().left(16));
}

void ChatOptions::setModel(const QString& folder, const QString& modelType)
{
    m_folder = folder;
    m_template.reset();
    QString problem;
    if (!folder.isEmpty()) {
        try {
            m_template = ChatTemplate::fromFolder(folder.toStdString());
        } catch (const std::exception& e) {
            problem = QString::fromStdString(e.what());
        }
    }
    bool on = false;
    if (m_template) {
        const QVariant saved = QSettings().value(settingsKey());
        on = saved.isValid() ? saved.toBool() : looksInstruct(modelName(folder), modelType);
    }
    {
        const QSignalBlocker block(m_toggle);
        m_toggle->setChecked(on);
    }
    if (folder.isEmpty())
        m_toggle->setToolTip(tr("Open a checkpoint: Chat needs its chat template"));
    else if (!problem.isEmpty())
        m_toggle->setToolTip(tr("The chat template cannot be read: %1").arg(problem));
    else if (!m_template)
        m_toggle->setToolTip(tr("This checkpoint has no chat template (neither chat_template.jinja nor \"chat_template\" "
                                "in tokenizer_config.json): the prompt is sent as plain text"));
    else
        m_toggle->setToolTip(tr("On: the prompt goes through %1 as one user message, with the generation prompt. "
                                "Off: the prompt is sent as plain text.")
                                 .arg(QString::fromStdString(m_template->path())));
    refresh();
    emit toggled(isOn());
}

void ChatOptions::setPrompt(const QString& prompt)
{
    m_prompt = prompt;
    refresh();
}

void ChatOptions::setHasTokenizer(bool has)
{
    if (has == m_hasTokenizer)
        return;
    m_hasTokenizer = has;
    refresh();
    emit toggled(isOn());
}

bool ChatOptions::isOn() const { return m_template && m_hasTokenizer && m_toggle->isChecked(); }

void ChatOptions::setOn(bool on) { m_toggle->setChecked(on); }

QString ChatOptions::rendered(const QString& prompt, bool* ok) const
{
    if (ok)
        *ok = false;
    if (!m_template)
        return {};
    try {
        const QString text = QString::fromStdString(m_template->applyToPrompt(prompt.toStdString()));
        if (ok)
            *ok = true;
        return text;
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
}

QString ChatOptions::previewText() const { return m_preview->isHidden() ? QString() : m_preview->toPlainText(); }

void ChatOptions::refresh()
{
    m_toggle->setEnabled(m_template.has_value() && m_hasTokenizer);
    const bool on = isOn();
    m_preview->setVisible(on);
    if (!m_template) {
        m_caption->setText(m_folder.isEmpty() ? QString() : tr("No chat template: the prompt is sent as plain text."));
    } else if (!m_hasTokenizer) {
        m_caption->setText(tr("This model has no tokenizer: the prompt is token ids, so no chat template."));
    } else if (!on) {
        m_caption->setText(tr("The prompt is sent as plain text, without the chat template."));
    } else {
        bool ok = false;
        const QString text = rendered(m_prompt, &ok);
        m_caption->setText(ok ? tr("What the model reads (%1 characters):").arg(text.size())
                              : tr("The chat template refuses this prompt; Generate would fail:"));
        if (m_preview->toPlainText() != text)
            m_preview->setPlainText(text);
    }
    m_caption->setVisible(!m_caption->text().isEmpty());
}

} // namespace stowage

#pragma once
// The Run page's Chat toggle: when the open checkpoint has a chat template
// (chat_template.jinja, or tokenizer_config.json's "chat_template"), the
// prompt can go to the worker as one user message through it (the `chat`
// field of generate and step, docs/worker-protocol.md). The widget renders
// the template itself (ChatTemplate, plain C++ without LibTorch) so the user
// sees what the model will read before Generate. Without a template the
// toggle is disabled and its tooltip says why. The choice is remembered per
// checkpoint in QSettings; a checkpoint never toggled starts on when its name
// says it is an instruct model.
#include "stowage/chattemplate.h"

#include <QString>
#include <QWidget>

#include <optional>

class QCheckBox;
class QLabel;
class QPlainTextEdit;

namespace stowage {

class ChatOptions : public QWidget {
    Q_OBJECT
public:
    explicit ChatOptions(QWidget* parent = nullptr);
    ~ChatOptions() override;

    // A newly opened checkpoint: `folder` holds its tokenizer files (empty:
    // none open), `modelType` is config.json's.
    void setModel(const QString& folder, const QString& modelType);
    // The prompt box changed: the preview follows it.
    void setPrompt(const QString& prompt);
    // A model without a tokenizer takes token ids: no chat then.
    void setHasTokenizer(bool has);

    bool hasTemplate() const { return m_template.has_value(); }
    // Whether Generate sends the prompt through the template.
    bool isOn() const;
    void setOn(bool on); // as a user's click: remembered
    // What the model reads for `prompt` with Chat on, or the reason it cannot
    // be rendered (`ok` false). Empty without a template.
    QString rendered(const QString& prompt, bool* ok = nullptr) const;
    QString previewText() const;
    QCheckBox* toggle() const { return m_toggle; }

    // Whether a checkpoint called `name` (folder or Hub repository) of
    // `modelType` is an instruct/chat model, from its name: "-Instruct",
    // "-it", "-chat", … ; Qwen3, gpt-oss and DeepSeek-V3 release their chat
    // models without a suffix and their base models as "-Base".
    static bool looksInstruct(const QString& name, const QString& modelType);
    // The name a user knows a checkpoint folder by: the Hub repository of a
    // cache snapshot ("models--org--name/snapshots/<hash>" -> "name"), else
    // the folder's own name.
    static QString modelName(const QString& folder);

signals:
    void toggled(bool on); // isOn() changed

private:
    void refresh();
    QString settingsKey() const;

    QCheckBox* m_toggle;
    QLabel* m_caption;
    QPlainTextEdit* m_preview;
    std::optional<ChatTemplate> m_template;
    QString m_folder;
    QString m_prompt;
    bool m_hasTokenizer = true;
};

} // namespace stowage
